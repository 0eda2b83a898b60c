"""Would the split forward's two passes run faster side by side than one after the other? The
local pass keeps the MUFU pipe 71% busy and the real pass issue 57% busy (Nsight Compute,
``benchmarks/RESULTS.md``, twenty-first session); run together on the same multiprocessors each
might fill the other's stalls. This probe records the three kernel launches of one eager forward
call of each of two independent problems P1 and P2 (B / C copy, local pass, real pass: the
launches the eager launcher makes, with their compiled kernels and argument values) and replays
them from CUDA graphs:

* ``local2`` / ``real1``: P2's local pass alone, P1's real pass alone;
* ``serial``: P2's local pass, then P1's real pass, on one stream;
* ``mixed``: the same two kernels on two streams at once;
* ``local2 x2`` / ``real1 x2``: two local passes (P1's and P2's) / two real passes side by side,
  for how much two kernels of one kind gain from running together.

    PYTHONPATH=src python benchmarks/selective_scan/mix_probe.py [--shape 1x1536x4096x16] [--dtype bf16]

Each time is ``do_bench``'s median (an L2 flush before each replay), us. The replays run the same
kernels on the same buffers as the recorded calls (P1's real pass reads the segment states P1's
local pass wrote when it was recorded), so every output is what the op computes."""

from __future__ import annotations

import argparse

import bench_gpu
import fwd_knob_sweep
import torch
import triton

from ssmscan.ops.common import launch_plan, triton_launch


def record(kw: dict) -> list[tuple]:
    """The (compiled kernel, grid, argument values) of each launch of one eager forward call of
    ``kw``, in order; the values hold the tensors, so the buffers stay alive."""
    recs: list[tuple] = []
    orig = triton_launch._fast_launch

    def spy(jit, grid, args, kwargs, check, like, capture=None):
        cap: list = []
        result = orig(jit, grid, args, kwargs, check, like, cap)
        recs.extend(cap)
        return result

    triton_launch._fast_launch = spy
    try:
        bench_gpu.ours_fwd(kw)
        torch.cuda.synchronize()
    finally:
        triton_launch._fast_launch = orig
    return [(c[0], c[1], c[2]) for c in recs]


def launch(rec: tuple, stream: torch.cuda.Stream) -> None:
    compiled, grid, values = rec
    g = (*grid, 1, 1)
    compiled.run(g[0], g[1], g[2], stream.cuda_stream, compiled.function,
                 compiled.packed_metadata, None, None, None, *values)  # fmt: skip


def graph_us(fn) -> float:
    """``fn`` (launches on the current stream and on side streams joined back) captured in a
    CUDA graph (``bench_gpu.graph_of``), replayed under ``do_bench``: median us."""
    g = bench_gpu.graph_of(fn)
    return 1e3 * triton.testing.do_bench(g.replay, return_mode="median", warmup=25, rep=200)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1x1536x4096x16")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--variant", default="base", help="as fwd_knob_sweep.py takes them")
    a = ap.parse_args()
    batch, dim, L, N = (int(x) for x in a.shape.split("x"))
    dtype = fwd_knob_sweep.DTYPES[a.dtype]
    launch_plan.ENABLED = False  # every launch through the launcher's fast path, recordable
    with fwd_knob_sweep.applied(a.variant):
        kws = [bench_gpu.make(batch, dim, L, N, dtype, seed=s) for s in (1, 2)]
        for kw in kws:  # compile
            bench_gpu.ours_fwd(kw)
        p1, p2 = (record(kw) for kw in kws)
    assert len(p1) == 3 and len(p2) == 3, (len(p1), len(p2))  # copy, local, real
    s2 = torch.cuda.Stream()

    def pair(x, y):
        def fn():
            cur = torch.cuda.current_stream()
            s2.wait_stream(cur)
            launch(x, cur)
            with torch.cuda.stream(s2):
                launch(y, s2)
            cur.wait_stream(s2)

        return fn

    cur = torch.cuda.current_stream
    cases = {
        "local2": lambda: launch(p2[1], cur()),
        "real1": lambda: launch(p1[2], cur()),
        "serial": lambda: (launch(p2[1], cur()), launch(p1[2], cur())),
        "mixed": pair(p1[2], p2[1]),
        "local2 x2": pair(p1[1], p2[1]),
        "real1 x2": pair(p1[2], p2[2]),
    }
    for rnd in range(2):
        for name, fn in cases.items():
            print(f"{a.shape} {a.dtype} {a.variant} round {rnd}: {name:10s} {graph_us(fn):8.2f} us",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
