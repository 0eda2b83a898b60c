"""Which multiprocessor runs which program of the two-channel real pass, and whether programs of
one segment placed together (sharing their B / C rows in L1) make it faster (twenty-ninth
session; ``triton_fwd.LANE_CH2_MAP``, the kernel's ``PID_MAP`` / ``PROBE``). Those settings are
not in the library: apply ``experiments/twentyninth_map_overlap.patch`` first (``patch -p1``).

1. Records each real-pass program's ``%smid`` (``LANE_PROBE_REAL`` = 2) a few times: the launch
   order to multiprocessor map of the first wave, and whether it repeats.
2. Builds program tables from it: identity (the table's own cost), co-located (the programs a
   multiprocessor runs take consecutive channel blocks of one segment) and shuffled (a control).
3. Times the forward under CUDA graphs with each table, interleaved over ``--rounds``, every
   variant checked against float64 first; and the B / C hot-row probes (``LANE_PROBE_REAL`` /
   ``LANE_PROBE_LOCAL`` = 1: every segment reads the first one's rows, wrong results by design,
   a bound on what row locality can buy) and ``LANE_SILU_TANH``.

    PYTHONPATH=src python benchmarks/selective_scan/ch2_map_probe.py [--rounds 5] [--out f.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics

import bench_gpu
import torch

from ssmscan.ops.selective_scan import triton_fwd


def smid_runs(kw: dict, programs: int, runs: int) -> list[list[int]]:
    """Each real-pass program's multiprocessor, in launch order, over ``runs`` forward calls."""
    triton_fwd.LANE_PROBE_REAL = 2
    try:
        res = []
        for _ in range(runs):
            _, last, _ = bench_gpu.ours_fwd(kw)
            torch.cuda.synchronize()
            res.append(last.flatten()[:programs].round().long().tolist())
        return res
    finally:
        triton_fwd.LANE_PROBE_REAL = 0


def colocated(sm: list[int]) -> list[int]:
    """A table giving the programs that one multiprocessor runs (``sm``: each program's, in
    launch order) consecutive work items (segment * blocks + channel block, so mostly one
    segment's), the largest groups first."""
    groups: dict[int, list[int]] = collections.defaultdict(list)
    for p, s in enumerate(sm):
        groups[s].append(p)
    table = [0] * len(sm)
    k = 0
    for s in sorted(groups, key=lambda s: (-len(groups[s]), s)):
        for p in groups[s]:
            table[p] = k
            k += 1
    return table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1x1536x4096x16")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    batch, dim, L, N = (int(x) for x in a.shape.split("x"))
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[a.dtype]
    kw = bench_gpu.make(batch, dim, L, N, dtype)
    refs = bench_gpu.references(kw, None, None)
    tol = bench_gpu.tolerance(dtype)

    triton_fwd.PROBED_GRIDS.clear()
    smid_runs(kw, 1, 1)
    nblk, _, nseg = triton_fwd.PROBED_GRIDS[-1]
    programs = nblk * nseg
    sms = smid_runs(kw, programs, 4)
    same = all(r == sms[0] for r in sms)
    per_sm = collections.Counter(sms[0])
    print(f"grid {nblk} x {programs // nblk}; runs identical: {same}; multiprocessors used "
          f"{len(per_sm)}; programs a multiprocessor {sorted(collections.Counter(per_sm.values()).items())}")  # fmt: skip
    print("launch order -> SM, first 40:", sms[0][:40])
    print("first program on each of the first 12 SMs:",
          sorted((s, sms[0].index(s)) for s in range(12) if s in sms[0]))  # fmt: skip
    tables = {
        "identity": list(range(programs)),
        "colocated": colocated(sms[0]),
    }
    g = torch.Generator().manual_seed(0)
    tables["shuffled"] = torch.randperm(programs, generator=g).tolist()
    # how many distinct segments each multiprocessor runs, per table
    for name, t in tables.items():
        segs: dict[int, set[int]] = collections.defaultdict(set)
        for p, s in enumerate(sms[0]):
            segs[s].add(t[p] // nblk)
        print(f"{name}: segments a multiprocessor (mean) "
              f"{statistics.mean(len(v) for v in segs.values()):.2f}")  # fmt: skip

    variants: dict[str, dict] = {"base": {}}
    for name, t in tables.items():
        variants["map " + name] = {
            "LANE_CH2_MAP": torch.tensor(t, dtype=torch.int32, device="cuda")
        }
    variants["silu tanh"] = {"LANE_SILU_TANH": 1}
    variants["probe: hot rows, real pass"] = {"LANE_PROBE_REAL": 1}
    variants["probe: hot rows, local pass"] = {"LANE_PROBE_LOCAL": 1}
    variants["probe: hot rows, both"] = {"LANE_PROBE_REAL": 1, "LANE_PROBE_LOCAL": 1}

    def apply(settings):
        saved = {k: getattr(triton_fwd, k) for k in settings}
        for k, v in settings.items():
            setattr(triton_fwd, k, v)
        return saved

    times: dict[str, list[float]] = {v: [] for v in variants}
    errs: dict[str, float] = {}
    for r in range(a.rounds):
        for name, settings in variants.items():
            saved = apply(settings)
            try:
                if r == 0:
                    e = bench_gpu.check(kw, None, refs)
                    errs[name] = max(e["out"], e["last"])
                    ok = "ok" if errs[name] <= tol else "FAILED"
                    ok += " (a probe: wrong by design)" if name.startswith("probe") else ""
                    print(f"check {name}: {e} {ok}", flush=True)
                times[name].append(bench_gpu.graph_ms(lambda: bench_gpu.ours_fwd(kw)))
            finally:
                apply(saved)
    base = statistics.median(times["base"])
    rows = []
    for name in variants:
        ms = statistics.median(times[name])
        rows.append(dict(variant=name, ms=ms, err=errs[name], rounds=times[name]))
        print(f"{a.shape} {a.dtype} {name:32s} {ms:.4f} ms ({ms / base:.3f} of base) "
              f"err {errs[name]:.1e}", flush=True)  # fmt: skip
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(rows=rows, sm=sms, torch=torch.__version__,
                           device=torch.cuda.get_device_name()), f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
