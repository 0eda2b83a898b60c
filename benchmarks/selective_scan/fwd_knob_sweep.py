"""The lane forward's kernel options, timed against each other: forward only, CUDA graphs, the
variants interleaved over ``--rounds`` rounds (each variant's median of its rounds' medians, so
that clock drift hits all alike), each variant's output checked against float64 on a channel
slice (``bench_gpu.references``) before it is timed.

    PYTHONPATH=src python benchmarks/selective_scan/fwd_knob_sweep.py \
        --variants "base;PF_BC=2;PF_BC=2,DT_DEFER=1" [--shapes 1x1536x4096x16] [--rounds 3]

A variant is ``;``-separated from the next, its settings ``,``-separated: ``NAME=INT`` for a
constexpr of ``_selective_scan_fwd_lane_kernel`` (through ``triton_fwd.LANE_OPTIONS``, both
passes), ``triton_fwd.NAME=INT`` / ``triton_common.NAME=INT`` for a module setting, ``TLANE.NAME=INT`` for a
constexpr of the time-lane kernels (through ``triton_fwd.TLANE_OPTIONS``), ``LOCAL.NAME=INT`` for
one of the split forward's one-channel local pass alone (``triton_fwd.LANE_LOCAL_OPTIONS``); ``base`` is the
library's default.
With ``--mamba`` mamba-ssm's forward (``selective_scan_cuda`` on the path) is timed the same way in
every round, and each variant's ratio to it printed. With ``--no-check`` a variant that fails the check
is timed too (a bound from a deliberately wrong kernel, e.g. one that skips work)."""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics

import bench_gpu
import torch

from ssmscan.ops.selective_scan import triton_common, triton_fwd

MODULES = {"triton_fwd": triton_fwd, "triton_common": triton_common}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


# the prefixes of kernel options that go into a dict of ``triton_fwd`` rather than a module
# setting, and that dict (a plain NAME=INT: ``LANE_OPTIONS``)
OPTION_DICTS = {"TLANE.": "TLANE_OPTIONS", "LOCAL.": "LANE_LOCAL_OPTIONS"}


def parse(spec: str) -> tuple[dict[str, int], dict[str, int]]:
    opts: dict[str, int] = {}
    mod: dict[str, int] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item or item == "base":
            continue
        name, value = item.split("=")
        if name.startswith(("triton_fwd.", "triton_common.", *OPTION_DICTS)):
            mod[name] = int(value)
        else:
            opts[name] = int(value)
    return opts, mod


@contextlib.contextmanager
def applied(spec: str):
    """The library's forward with variant ``spec`` set (kernel options on top of
    ``triton_fwd.LANE_OPTIONS`` and the dicts of ``OPTION_DICTS``, module settings); everything
    restored on exit."""
    opts, mod = parse(spec)
    extra = {"LANE_OPTIONS": opts}
    for prefix, attr in OPTION_DICTS.items():
        extra[attr] = {k[len(prefix) :]: v for k, v in mod.items() if k.startswith(prefix)}
    mod = {k: v for k, v in mod.items() if not k.startswith(tuple(OPTION_DICTS))}
    targets = {k: (MODULES[k.split(".")[0]], k.split(".")[1]) for k in mod}
    saved_dicts = {attr: getattr(triton_fwd, attr) for attr in extra}
    saved = {k: getattr(m, n) for k, (m, n) in targets.items()}
    try:
        for attr, more in extra.items():
            setattr(triton_fwd, attr, {**saved_dicts[attr], **more})
        for k, (m, n) in targets.items():
            setattr(m, n, mod[k])
        yield
    finally:
        for attr, old in saved_dicts.items():
            setattr(triton_fwd, attr, old)
        for k, (m, n) in targets.items():
            setattr(m, n, saved[k])


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
