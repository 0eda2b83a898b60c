"""The lane forward's plans, timed against each other: forward only, CUDA graphs, the variants
interleaved over ``--rounds`` rounds (each variant's median of its rounds' medians, so that clock
drift hits all alike), each variant's output checked against float64 on a channel slice
(``bench_gpu.references``) before it is timed.

    PYTHONPATH=src python benchmarks/selective_scan/fwd_knob_sweep.py \
        --variants "base;policy.two_channels=0;EVEN=0" [--shapes 1x1536x4096x16] [--rounds 3]

A variant is ``;``-separated from the next, its settings ``,``-separated: ``policy.NAME=INT`` for
a field of the planner's ``Policy``, ``NAME=INT`` for a constexpr or launch option (``maxnreg``)
of the plan's launches of the lane kernels (local and real pass), set on the planned plan;
``base`` is the library's plan.
With ``--mamba`` mamba-ssm's forward (``selective_scan_cuda`` on the path) is timed the same way in
every round, and each variant's ratio to it printed. With ``--no-check`` a variant that fails the check
is timed too (a bound from a deliberately wrong kernel, e.g. one that skips work)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics

import bench_gpu
import torch

from ssmscan.ops.selective_scan import triton_fwd
from ssmscan.ops.selective_scan.plan import Launch, Policy

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def parse(spec: str) -> tuple[dict[str, int], dict[str, int]]:
    """(launch constexprs / options, policy fields) of a variant."""
    opts: dict[str, int] = {}
    pol: dict[str, int] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item or item == "base":
            continue
        name, value = item.split("=")
        if name.startswith("policy."):
            pol[name[len("policy.") :]] = int(value)
        else:
            opts[name] = int(value)
    return opts, pol


def _with(launch: Launch | None, opts: dict[str, int]) -> Launch | None:
    if launch is None or not launch.kernel.startswith("fwd_lane"):
        return launch
    return dataclasses.replace(launch, consts=tuple({**launch.kw(), **opts}.items()))


@contextlib.contextmanager
def applied(spec: str):
    """The library's forward with variant ``spec``: its policy fields, then its constexprs on
    the plan's lane launches; the planner's plans again on exit."""
    opts, pol = parse(spec)
    plan_for = triton_fwd.plan_for
    policy = Policy(**{**Policy().__dict__, **pol})

    def planned(u, A, B, C, _policy=None, facts=None):
        plan = plan_for(u, A, B, C, policy, facts)  # (bench_gpu's: its ``_CHOICE`` policy)
        return dataclasses.replace(plan, local=_with(plan.local, opts), real=_with(plan.real, opts))

    saved = bench_gpu._CHOICE["policy"]
    bench_gpu._CHOICE["policy"] = policy
    triton_fwd.plan_for = planned
    bench_gpu._forget_recorded_launches()
    try:
        yield
    finally:
        triton_fwd.plan_for = plan_for
        bench_gpu._CHOICE["policy"] = saved
        bench_gpu._forget_recorded_launches()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="base")
    ap.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in bench_gpu.SHAPES))
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--mamba", action="store_true", help="time mamba-ssm's forward too")
    ap.add_argument(
        "--no-check",
        action="store_true",
        help="time variants that fail the float64 check too (bounding experiments)",
    )
    a = ap.parse_args()
    mb = None
    if a.mamba:
        import selective_scan_cuda as mb  # type: ignore[import-not-found]
    variants = [v.strip() for v in a.variants.split(";") if v.strip()]
    tol = {dt: bench_gpu.tolerance(dt) for dt in DTYPES.values()}
    rows = []
    for sh in a.shapes.split(","):
        batch, dim, L, N = (int(x) for x in sh.split("x"))
        for dn in a.dtypes.split(","):
            dtype = DTYPES[dn]
            kw = bench_gpu.make(batch, dim, L, N, dtype)
            refs = bench_gpu.references(kw, None, None)
            times: dict[str, list[float]] = {v: [] for v in variants}
            errs: dict[str, float] = {}
            mamba_ms: list[float] = []
            for r in range(a.rounds):
                if mb is not None:
                    mamba_ms.append(bench_gpu.graph_ms(lambda kw=kw: bench_gpu.mamba_fwd(mb, kw)))
                for v in variants:
                    with applied(v):
                        if r == 0:
                            e = bench_gpu.check(kw, None, refs)
                            errs[v] = max(e["out"], e["last"])
                            if errs[v] > tol[dtype]:
                                print(f"FAILED CHECK {sh} {dn} {v}: {e}", flush=True)
                        if errs[v] > tol[dtype] and not a.no_check:
                            continue
                        times[v].append(bench_gpu.graph_ms(lambda kw=kw: bench_gpu.ours_fwd(kw)))
            base = statistics.median(times[variants[0]]) if times[variants[0]] else None
            mamba = statistics.median(mamba_ms) if mamba_ms else None
            if mamba is not None:
                rows.append(
                    dict(shape=sh, dtype=dn, variant="mamba-ssm", ms=mamba, rounds=mamba_ms)
                )
                print(f"{sh} {dn} {'mamba-ssm':40s} {round(mamba, 4)} ms", flush=True)
            for v in variants:
                ms = statistics.median(times[v]) if times[v] else None
                rows.append(dict(shape=sh, dtype=dn, variant=v, ms=ms, err=errs.get(v),
                                 rounds=times[v]))  # fmt: skip
                ratio = f" ({ms / base:.3f} of the first)" if ms and base else ""
                if ms and mamba:
                    ratio += f" ({ms / mamba:.3f} of mamba-ssm)"
                print(f"{sh} {dn} {v:40s} {ms if ms is None else round(ms, 4)} ms{ratio}"
                      f" err {errs.get(v, float('nan')):.1e}", flush=True)  # fmt: skip
            del kw, refs
            torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(rows=rows, torch=torch.__version__,
                           device=torch.cuda.get_device_name()), f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
