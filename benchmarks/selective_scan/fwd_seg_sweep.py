"""The lane forward's L split at small batch, retimed: ``triton_common.FWD_TARGET_WARPS`` (the
warps the split aims for; it was set for an older forward layout) and the checkpoint length, one
at a time, forward only, against mamba-ssm's forward in the same process when importable.

    PYTHONPATH=src:/tmp/mbuild python benchmarks/selective_scan/fwd_seg_sweep.py \
        [--shapes 1x1536x4096x16,1x1024x65536x16] [--targets 2112,4224,8448,16896,33792]

Each variant's output is compared with the default's (relative max difference: the split
changes only the order of the fp32 sums); medians in ms from CUDA graphs (``graph_ms``) and
``do_bench`` (eager)."""

from __future__ import annotations

import argparse

import bench_gpu
import torch
import triton

from ssmscan.ops.selective_scan import shapes, triton_common, triton_fwd, triton_fwd_lane


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x1536x4096x16,1x1024x65536x16")
    ap.add_argument("--targets", default="2112,4224,8448,16896,33792")
    ap.add_argument("--cks", default="128,256")
    a = ap.parse_args()
    try:
        import selective_scan_cuda as mb
    except ImportError:
        mb = None
    default_t, default_ck = triton_common.FWD_TARGET_WARPS, shapes.CHECKPOINT_LEN
    targets = [int(t) for t in a.targets.split(",")]
    cks = [int(c) for c in a.cks.split(",")]
    for sh in a.shapes.split(","):
        batch, dim, L, N = (int(x) for x in sh.split("x"))
        for dtype in (torch.bfloat16, torch.float32):
            kw = bench_gpu.make(batch, dim, L, N, dtype)
            ref = bench_gpu.ours_fwd(kw)[0].float()
            line = f"{sh} {str(dtype)[6:]}:"
            if mb is not None:
                m = bench_gpu.graph_ms(lambda kw=kw: bench_gpu.mamba_fwd(mb, kw))
                line += f" mamba {m:.4f} (graph)"
            print(line, flush=True)
            variants = [(t, default_ck) for t in targets] + [
                (default_t, c) for c in cks if c != default_ck
            ]
            for t, ck in variants:
                triton_common.FWD_TARGET_WARPS = t
                bench_gpu.set_checkpoint_len(ck)
                try:
                    lane = triton_fwd_lane.lane_geometry(16)[0]
                    block_d, warps = triton_fwd.fwd_block_channels(batch, dim, 1, 16, lane)
                    nblk = -(-dim // block_d)
                    nseg, seg = triton_common.segments(
                        batch * nblk * warps, shapes.num_checkpoints(L) - 1, t
                    )
                    out = bench_gpu.ours_fwd(kw)[0].float()
                    diff = ((out - ref).abs().max() / ref.abs().max()).item()
                    g = bench_gpu.graph_ms(lambda kw=kw: bench_gpu.ours_fwd(kw))
                    e = triton.testing.do_bench(
                        lambda kw=kw: bench_gpu.ours_fwd(kw),
                        return_mode="median",
                        warmup=10,
                        rep=60,
                    )
                    print(
                        f"  target {t:6d} ck {ck:4d}: {nseg:4d} segments of {seg * ck:6d} steps, "
                        f"graph {g:.4f} ms, eager {e:.4f} ms, rel diff vs default {diff:.1e}",
                        flush=True,
                    )
                finally:
                    triton_common.FWD_TARGET_WARPS = default_t
                    bench_gpu.set_checkpoint_len(default_ck)


if __name__ == "__main__":
    main()
