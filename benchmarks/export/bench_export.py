"""Deployment benchmarks: (1) export time, node count and artifact size as L grows, per realization;
(2) CPU latency of one Mamba block (``ssmscan.models.MambaBlock``, preset "small": d_model 256,
d_inner 512, N 16, batch 1) in ONNX Runtime with each realization, AOTInductor, eager ssmscan and
the sequential loop (``impl="reference"``), side by side in one run. Correctness first: a variant
whose output differs from eager by more than the fp32 tolerance is reported, not timed.

    PYTHONPATH=src python benchmarks/export/bench_export.py growth --lengths 64 1024 16384
    PYTHONPATH=src python benchmarks/export/bench_export.py latency --lengths 1024 8192
    PYTHONPATH=src python benchmarks/export/bench_export.py latency --device cuda --lengths 1024 8192
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch

import ssmscan
from ssmscan.models import MambaBlock, MambaConfig
from ssmscan.testing import rel_error, tolerance


def make_block(device: str, impl: str = "auto") -> MambaBlock:
    torch.manual_seed(0)
    return MambaBlock(MambaConfig.preset("small"), impl=impl).to(device).eval()  # type: ignore[arg-type]


def inputs(L: int, device: str) -> tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(L)
    return (torch.randn(1, L, 256, generator=g).to(device),)


def median_ms(fn, reps: int, device: str) -> float:
    if device == "cuda":
        import triton.testing

        return triton.testing.do_bench(fn, warmup=5, rep=50, return_mode="median")
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def growth(lengths: list[int], targets: list[str]) -> list[dict]:
    block = make_block("cpu")
    rows = []
    for target, realization in [(t, r) for t in targets for r in ("loop", "parallel")]:
        for L in lengths:
            d = tempfile.mkdtemp(prefix="ssmscan-bench-")
            path = os.path.join(d, "m.onnx" if target == "onnx" else "m.pt2")
            t0 = time.perf_counter()
            res = ssmscan.export(
                block, inputs(L, "cpu"), target, path=path, realization=realization
            )
            row = dict(
                target=target,
                realization=realization,
                L=L,
                total_s=round(time.perf_counter() - t0, 2),
                nodes=res.report.node_count,
                bytes=res.report.artifact_bytes,
                stages={k: round(v, 2) for k, v in res.report.stage_seconds.items()},
            )
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def latency(lengths: list[int], device: str, reps: int, loop_max_L: int) -> list[dict]:
    block = make_block(device)
    ref_block = make_block(device, impl="reference")
    tol = tolerance(torch.float32)
    rows = []
    for L in lengths:
        x = inputs(L, device)
        with torch.no_grad():
            want = block(*x)[0]
        variants: dict[str, object] = {"eager ssmscan": lambda x=x: block(*x)}
        if L <= loop_max_L:
            variants["sequential loop"] = lambda x=x: ref_block(*x)
        targets = [("aoti", None)] if device == "cuda" else []
        targets += [("aoti", "loop"), ("aoti", "parallel")] if device == "cpu" else []
        targets += [("onnx", "loop"), ("onnx", "parallel")] if device == "cpu" else []
        for target, real in targets:
            try:
                t0 = time.perf_counter()
                res = ssmscan.export(block, x, target, realization=real)
                build_s = time.perf_counter() - t0
            except Exception as e:  # report and go on: one broken target must not hide the rest
                rows.append(dict(L=L, variant=f"{target} {real}", error=str(e)[:200]))
                print(json.dumps(rows[-1]), flush=True)
                continue
            variants[f"{target} {real or 'kernel'} (built in {build_s:.0f} s)"] = (
                lambda res=res, x=x: res.run(*x)
            )
        base = None
        for name, fn in variants.items():
            with torch.no_grad():
                out = fn()  # type: ignore[operator]
            got = out[0]
            err = rel_error(got.float(), want.float())
            row = dict(L=L, variant=name, rel_err=float(f"{err:.2e}"))
            if err > tol:
                row["refused"] = f"error {err:.1e} > {tol:.0e}"
            else:
                with torch.no_grad():
                    row["ms"] = round(median_ms(fn, reps, device), 3)  # type: ignore[arg-type]
                base = base or row["ms"]
                row["vs_eager"] = round(base / row["ms"], 2)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("what", choices=["growth", "latency"])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 8192])
    p.add_argument("--targets", nargs="+", default=["onnx"], help="growth: onnx and/or aoti")
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--loop-max-L", type=int, default=8192, help="skip the slow loop above this")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args()
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, {args}", flush=True)
    if args.what == "growth":
        rows = growth(args.lengths, args.targets)
    else:
        rows = latency(args.lengths, args.device, args.reps, args.loop_max_L)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
