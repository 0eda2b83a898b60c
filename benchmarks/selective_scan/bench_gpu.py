"""GPU selective scan: ssmscan's Triton kernels and mamba-ssm's CUDA kernel side by side.

Correctness first: for every (shape, dtype) the forward is compared on a channel slice with the
float64 reference, and the backward (all gradients) with mamba-ssm's where it is importable; a
variant that fails is not timed. Times are ``triton.testing.do_bench`` medians; the floor is
max(bytes / 4.2 TB/s, exponentials / 4.0e12 per s) (forward: one exp per (b, d, n, t) and each
input read / output written once; forward+backward: two exps and the backward's reads / writes
added).

    PYTHONPATH=src:/tmp/mbuild python benchmarks/selective_scan/bench_gpu.py --out results.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time

import torch
import triton

from ssmscan.ops.selective_scan import op as _op  # noqa: F401  (registers the ops)
from ssmscan.ops.selective_scan import shapes, triton_bwd, triton_fwd
from ssmscan.ops.selective_scan.plan import Policy
from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.testing import tolerance

BW, EXP_RATE = 4.2e12, 4.0e12
SHAPES = [(8, 4096, 2048, 16), (16, 1536, 1024, 16), (1, 1536, 4096, 16), (1, 1024, 65536, 16)]

# The plans the op runs while timing a variant: the planner's for ``policy``, or its fallback
# ("tile" forward, "split" backward). The op's launchers ask ``plan_for``; this script answers for
# them (an experiment's plan, passed in; the library has no setting for it).
_CHOICE: dict = {"policy": Policy(), "fwd": "lane", "bwd": "lane"}
_PLAN_FWD, _PLAN_BWD = triton_fwd.plan_for, triton_bwd.plan_for


def _fwd_plan(u, A, B, C, policy=None, facts=None):
    plan = _PLAN_FWD(u, A, B, C, _CHOICE["policy"], facts)
    return plan.fallback if _CHOICE["fwd"] == "tile" and plan.fallback else plan


def _bwd_plan(u, A, B, tensors, policy=None, facts=None):
    plan = _PLAN_BWD(u, A, B, tensors, _CHOICE["policy"], facts)
    return plan.fallback if _CHOICE["bwd"] == "split" and plan.fallback else plan


triton_fwd.plan_for = _fwd_plan
triton_bwd.plan_for = _bwd_plan


def _forget_recorded_launches() -> None:
    """Recorded eager launches are per call signature, not per plan: dropped at every switch."""
    for fn in (triton_fwd.forward, triton_bwd.backward):
        fn.plans.clear()
        fn.seen.clear()


def set_target_warps(w: int) -> None:
    """Note [selective scan segments]: -1 = the library's policy; 0 = never split L; w > 0 =
    split L (forward and backward) whenever the launch has fewer than w warps, aiming at w."""
    pol = _CHOICE["policy"]
    if w < 0:
        new = dataclasses.replace(pol, warps_per_sm=16, fwd_warps_per_sm=64, split_below_warps=512)
    else:
        per_sm = max(1, w // 132)
        new = dataclasses.replace(pol, warps_per_sm=per_sm, fwd_warps_per_sm=per_sm,
                                  split_below_warps=w)  # fmt: skip
    _CHOICE["policy"] = new
    _forget_recorded_launches()


def set_variant(spec: str) -> None:
    """``spec``: the backward, "lane" (the planner's) or "split" (the lane plan's fallback), with
    options: sN (the states kernel's register cap; s0: none), wN (warps per lane forward / states
    program), carrykernel / foldall (fold at most 0 / any segments in the lane main kernel), 1ch
    (the forward's real pass with one channel a thread), rows16 (16-bit B / C rows wherever they
    can be), nors (the plain 2-D "tile" backward wherever the planner would pick "tile_rs"); e.g.
    lane-s0. Options not named are the library's defaults."""
    name, *opts = spec.split("-")
    if name not in ("lane", "split"):
        raise SystemExit(f"backward variant {name!r}: 'lane' (planned) or 'split'")
    _CHOICE["bwd"] = name
    cap = {o[0]: int(o[1:]) for o in opts if o[0] in "sw" and o[1:].isdigit()}
    base = Policy()
    fold = 0 if "carrykernel" in opts else 1 << 30 if "foldall" in opts else base.fold_max_segments
    pol = _CHOICE["policy"]
    _CHOICE["policy"] = dataclasses.replace(
        pol, states_maxnreg=cap.get("s", base.states_maxnreg),
        fwd_warps=cap.get("w", base.fwd_warps), fold_max_segments=fold,
        two_channels="1ch" not in opts, rows16="always" if "rows16" in opts else "where_fit",
        rs_max_np=0 if "nors" in opts else base.rs_max_np,
    )  # fmt: skip
    _forget_recorded_launches()


def set_fwd_variant(fv: str) -> None:
    """ "lane" (the planner's forward) or "tile" (the lane plan's fallback, the 2-D kernel)."""
    if fv not in ("lane", "tile"):
        raise SystemExit(f"forward variant {fv!r}: 'lane' (planned) or 'tile'")
    _CHOICE["fwd"] = fv
    _forget_recorded_launches()


def make(batch, dim, L, N, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s, dt=dtype: torch.randn(*s, generator=g, device="cuda", dtype=torch.float32).to(dt)  # noqa: E731
    lo, hi = math.log(1e-3), math.log(1e-1)
    dt = torch.exp(torch.rand(batch, dim, L, generator=g, device="cuda") * (hi - lo) + lo)
    bias_dt = torch.exp(torch.rand(dim, generator=g, device="cuda") * (hi - lo) + lo)
    inv = lambda y: y + torch.log(-torch.expm1(-y))  # noqa: E731
    bias = inv(bias_dt)
    return dict(
        u=r(batch, dim, L),
        delta=(inv(dt) - bias[:, None]).to(dtype),
        A=-torch.exp(0.5 * r(dim, N, dt=torch.float32)),
        B=r(batch, N, L),
        C=r(batch, N, L),
        D=r(dim, dt=torch.float32),
        z=r(batch, dim, L),
        delta_bias=bias,
    )


def host_case(ap):
    """The host-time scripts' command line (``[B D L N] [--dtype bf16]``, added to ``ap``): the
    parsed arguments, the inputs (``make``) and a ``dout`` for them."""
    ap.add_argument("shape", nargs="*", type=int, default=[1, 1536, 4096, 16])
    ap.add_argument("--dtype", default="bf16")
    a = ap.parse_args()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    kw = make(*a.shape, dtype)
    return a, kw, torch.randn_like(kw["u"])


def rel(x, r):
    x, r = x.double(), r.double()
    return ((x - r).abs().max() / r.abs().max()).item()


def ours_fwd(kw):
    return torch.ops.ssmscan.selective_scan_fwd(
        kw["u"],
        kw["delta"],
        kw["A"],
        kw["B"],
        kw["C"],
        kw["D"],
        kw["z"],
        kw["delta_bias"],
        None,
        True,
    )


def ours_fwd_bwd(kw, dout):
    _out, _last, ck = ours_fwd(kw)
    return torch.ops.ssmscan.selective_scan_bwd(
        dout,
        None,
        kw["u"],
        kw["delta"],
        kw["A"],
        kw["B"],
        kw["C"],
        kw["D"],
        kw["z"],
        kw["delta_bias"],
        None,
        ck,
        True,
    )


def api_fwd(kw):
    """The public API in eager, as users call it (Note [eager CUDA fast path]), no grad."""
    import ssmscan

    with torch.no_grad():
        return ssmscan.selective_scan(**kw, delta_softplus=True)


def api_fwd_bwd(kw_grad, dout):
    """The public API's forward with every input requiring grad, then its backward through
    autograd (``torch.autograd.grad``: no accumulation into ``.grad``)."""
    import ssmscan

    out = ssmscan.selective_scan(**kw_grad, delta_softplus=True)
    return torch.autograd.grad(out, list(kw_grad.values()), dout)


def mamba_fwd(mb, kw):
    B4, C4 = kw["B"].unsqueeze(1), kw["C"].unsqueeze(1)
    return mb.fwd(kw["u"], kw["delta"], kw["A"], B4, C4, kw["D"], kw["z"], kw["delta_bias"], True)


def mamba_fwd_bwd(mb, kw, dout):
    B4, C4 = kw["B"].unsqueeze(1), kw["C"].unsqueeze(1)
    out, x, _out_z = mb.fwd(
        kw["u"], kw["delta"], kw["A"], B4, C4, kw["D"], kw["z"], kw["delta_bias"], True
    )
    return mb.bwd(
        kw["u"],
        kw["delta"],
        kw["A"],
        B4,
        C4,
        kw["D"],
        kw["z"],
        kw["delta_bias"],
        dout,
        x,
        out,
        None,
        True,
        False,
    )


def references(kw, dout, mb):
    """float64 forward on 128 channels of batch 0 (the first 4096 steps when L is longer: the scan is
    causal, so that prefix of ours is checked exactly), and mamba-ssm's forward and gradients."""
    sl = {k: v for k, v in kw.items()}
    nd = min(128, kw["u"].shape[1])
    Lp = min(kw["u"].shape[2], 4096)
    for k in ("u", "delta", "z"):
        sl[k] = kw[k][:1, :nd, :Lp].double()
    sl["A"], sl["D"], sl["delta_bias"] = (
        kw["A"][:nd].double(),
        kw["D"][:nd].double(),
        kw["delta_bias"][:nd].double(),
    )
    sl["B"], sl["C"] = kw["B"][:1, :, :Lp].double(), kw["C"][:1, :, :Lp].double()
    r_out, r_last = selective_scan_reference(
        sl["u"],
        sl["delta"],
        sl["A"],
        sl["B"],
        sl["C"],
        sl["D"],
        sl["z"],
        sl["delta_bias"],
        True,
        True,
    )
    if mb is None:
        return nd, r_out, r_last, None, None
    return nd, r_out, r_last, mamba_fwd(mb, kw)[2], mamba_fwd_bwd(mb, kw, dout)


def check(kw, dout, refs):
    """Errors of ours: forward vs float64 on a channel slice; everything vs mamba-ssm."""
    nd, r_out, r_last, mo, theirs = refs
    errs = {}
    out, last, _ = ours_fwd(kw)
    Lp = r_out.shape[-1]
    errs["out"] = rel(out[:1, :nd, :Lp], r_out)
    # last state vs float64 only when the reference saw all of L (else covered by out vs mamba-ssm)
    errs["last"] = rel(last[:1, :nd], r_last) if Lp == out.shape[-1] else 0.0
    if mo is not None:
        errs["out_vs_mamba"] = rel(out, mo)  # mo: mamba-ssm's gated output out_z
        ours = ours_fwd_bwd(kw, dout)
        names = ("du", "ddelta", "dA", "dB", "dC")
        for n, a, b in zip(names, ours[:5], theirs[:5]):
            errs[n + "_vs_mamba"] = rel(a, b.reshape(a.shape))
        dD, dz, dbias = ours[5]
        errs["dD_vs_mamba"] = rel(dD, theirs[5])
        errs["dbias_vs_mamba"] = rel(dbias, theirs[6])
        errs["dz_vs_mamba"] = rel(dz, theirs[7])
    return errs


def graph_of(fn) -> torch.cuda.CUDAGraph:
    """A CUDA graph of ``fn`` (run three times on a side stream first: compiles, allocator
    warm-up)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def graph_ms(fn) -> float:
    """Median ms of ``fn`` replayed from a CUDA graph: the GPU time without the host's launch
    overhead (what torch.compile's "reduce-overhead" mode gives)."""
    g = graph_of(fn)
    ms = triton.testing.do_bench(g.replay, return_mode="median", warmup=10, rep=60)
    del g
    return ms


def floors(batch, dim, L, N, dtype):
    el = torch.empty((), dtype=dtype).element_size()
    exps = batch * dim * L * N
    bdl, bnl = batch * dim * L * el, batch * N * L * el
    fwd_bytes = 4 * bdl + 2 * bnl  # u, delta, z in; out
    fb_bytes = (
        fwd_bytes + 7 * bdl + 4 * bnl
    )  # + dout, u, delta, z in; du, ddelta, dz out; B, C in, dB, dC out
    return max(fwd_bytes / BW, exps / EXP_RATE), max(fb_bytes / BW, 2 * exps / EXP_RATE)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench_gpu.json")
    ap.add_argument(
        "--api", action="store_true", help="also time the public API in eager (fast path)"
    )
    ap.add_argument(
        "--targets",
        default="-1",
        help="target warps to time (-1: the planner's policy, 0: no L split)",
    )
    ap.add_argument("--shapes", default=None, help="e.g. 8x4096x2048x16,1x1024x65536x16")
    ap.add_argument("--tol-fwd", type=float, default=None)
    ap.add_argument(
        "--graph", action="store_true", help="also time both from CUDA graphs (no host overhead)"
    )
    ap.add_argument(
        "--bwd-variants",
        default="lane",
        help="backward variants to time, with options (``set_variant``), e.g. "
        "split,lane-s0 (keys get a suffix for all but the library's default)",
    )
    ap.add_argument(
        "--fwd-variants",
        default="lane",
        help="forward variants to time: lane (planned), tile (the 2-D kernel)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds over everything timed for a (shape, dtype), interleaved; medians of rounds",
    )
    args = ap.parse_args()
    try:
        import selective_scan_cuda as mb
    except ImportError:
        mb = None
        print("mamba-ssm's selective_scan_cuda not importable: timing ours only", flush=True)
    tol = {dt: tolerance(dt) for dt in (torch.float32, torch.bfloat16)}  # the one table
    rows = []
    shapes_ = (
        SHAPES
        if args.shapes is None
        else [tuple(int(x) for x in sh.split("x")) for sh in args.shapes.split(",")]
    )
    default_bwd, default_fwd = "lane", "lane"
    # the checkpoint length is the checkpoints' format (``shapes.CHECKPOINT_LEN``), not a
    # setting: it stays in the keys so that they compare with earlier runs
    ck = shapes.CHECKPOINT_LEN
    variants = [
        (ck, tw, bv, fv)
        for tw in [int(t) for t in args.targets.split(",")]
        for bv in args.bwd_variants.split(",")
        for fv in args.fwd_variants.split(",")
    ]

    def key(ck, tw, bv, fv):
        return (
            f"{ck}w{tw}"
            + ("" if bv == default_bwd else bv)
            + ("" if fv == default_fwd else "f" + fv)
        )

    def set_all(ck, tw, bv, fv):
        set_variant(bv)
        set_target_warps(tw)
        set_fwd_variant(fv)

    def bench(fn):
        return triton.testing.do_bench(fn, return_mode="median", warmup=10, rep=60)

    for batch, dim, L, N in shapes_:
        for dtype in (torch.float32, torch.bfloat16):
            kw = make(batch, dim, L, N, dtype)
            dout = torch.randn(batch, dim, L, device="cuda").to(dtype)
            f_floor, fb_floor = floors(batch, dim, L, N, dtype)
            row = dict(
                shape=[batch, dim, L, N],
                dtype=str(dtype).split(".")[-1],
                floor_fwd_ms=f_floor * 1e3,
                floor_fb_ms=fb_floor * 1e3,
            )
            refs = references(kw, dout, mb)
            # what is timed, each (row key, settings, fn): mamba-ssm's, then every variant that
            # passes its check (``*_graph_ms`` keys replayed from a CUDA graph); the rounds run
            # them all in turn (``--rounds``), each key's time the median of its rounds'
            # medians, so that nothing is timed only first
            timed = []
            if mb is not None:
                timed += [
                    ("mamba_fwd_ms", None, lambda kw=kw: mamba_fwd(mb, kw)),
                    ("mamba_fb_ms", None, lambda kw=kw, dout=dout: mamba_fwd_bwd(mb, kw, dout)),
                ]
                if args.graph:
                    timed += [
                        ("mamba_fwd_graph_ms", None, lambda kw=kw: mamba_fwd(mb, kw)),
                        ("mamba_fb_graph_ms", None, lambda kw=kw, dout=dout: mamba_fwd_bwd(mb, kw, dout)),
                    ]  # fmt: skip
            for ck, tw, bv, fv in variants:
                set_all(ck, tw, bv, fv)
                k = key(ck, tw, bv, fv)
                errs = check(kw, dout, refs)
                ok = (
                    errs["out"] <= tol[dtype]
                    and errs["last"] <= tol[dtype]
                    and all(
                        v <= 10 * tol[dtype] for k_, v in errs.items() if k_.endswith("_vs_mamba")
                    )
                )
                row[f"ck{k}_errors"] = errs
                row[f"ck{k}_ok"] = ok
                if not ok:
                    print(
                        "FAILED CHECK, not timed:", row["shape"], row["dtype"], k, errs, flush=True
                    )
                    continue
                v = (ck, tw, bv, fv)
                timed += [
                    (f"ck{k}_fwd_ms", v, lambda kw=kw: ours_fwd(kw)),
                    (f"ck{k}_fb_ms", v, lambda kw=kw, dout=dout: ours_fwd_bwd(kw, dout)),
                ]
                if args.api:
                    kwg = {n: t.detach().clone().requires_grad_() for n, t in kw.items()}
                    timed += [
                        (f"ck{k}_api_fwd_ms", v, lambda kw=kw: api_fwd(kw)),
                        (f"ck{k}_api_fb_ms", v, lambda kwg=kwg, dout=dout: api_fwd_bwd(kwg, dout)),
                    ]
                if args.graph:
                    timed += [
                        (f"ck{k}_fwd_graph_ms", v, lambda kw=kw: ours_fwd(kw)),
                        (f"ck{k}_fb_graph_ms", v, lambda kw=kw, dout=dout: ours_fwd_bwd(kw, dout)),
                    ]  # fmt: skip
            rounds: dict[str, list[float]] = {k: [] for k, _, _ in timed}
            for _ in range(args.rounds):
                for k, v, fn in timed:
                    if v is not None:
                        set_all(*v)
                    ms = graph_ms(fn) if k.endswith("_graph_ms") else bench(fn)
                    rounds[k].append(ms)
            for k, ms in rounds.items():
                row[k] = statistics.median(ms)
                row[k.replace("_ms", "_rounds")] = ms
            set_variant(default_bwd)  # the library's variants (and their options) again
            set_fwd_variant(default_fwd)
            rows.append(row)
            print(json.dumps(row), flush=True)
            del kw, dout, refs
            torch.cuda.empty_cache()
    meta = dict(
        date=time.strftime("%Y-%m-%d"),
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        triton=triton.__version__,
        python=sys.version.split()[0],
    )
    # eager launch plans a key could not record (Note [eager launch plans]): such calls run the
    # normal, slower host path in every eager row of that key
    meta["plans_rejected"] = {
        "forward": [str(v) for v in triton_fwd.forward.rejected.values()],
        "backward": [str(v) for v in triton_bwd.backward.rejected.values()],
    }
    print("launch plans rejected:", meta["plans_rejected"], flush=True)
    json.dump(dict(meta=meta, rows=rows), open(args.out, "w"), indent=1)
    print(
        "\n| shape | dtype | CK w target warps | mamba fwd | ours fwd | ratio | floor frac | mamba f+b | ours f+b | ratio | floor frac |"
    )
    for r in rows:
        for ck in [key(*v) for v in variants]:
            if f"ck{ck}_fwd_ms" not in r:
                continue
            mf, mfb = r.get("mamba_fwd_ms", float("nan")), r.get("mamba_fb_ms", float("nan"))
            of, ofb = r[f"ck{ck}_fwd_ms"], r[f"ck{ck}_fb_ms"]
            print(
                f"| {r['shape']} | {r['dtype']} | {ck} | {mf:.3f} | {of:.3f} | {of / mf:.2f} | "
                f"{r['floor_fwd_ms'] / of:.2f} | {mfb:.3f} | {ofb:.3f} | {ofb / mfb:.2f} | {r['floor_fb_ms'] / ofb:.2f} |"
            )
    cks = [key(*v) for v in variants]
    if args.api:
        ratio_table(
            "\nPublic API in eager (ssmscan.selective_scan; f+b through autograd):\n"
            "| shape | dtype | CK w target warps | mamba fwd | api fwd | ratio | mamba f+b | api f+b | ratio |",
            rows, cks, "mamba_{}_ms", "ck{}_api_{}_ms",
        )  # fmt: skip
    if args.graph:
        ratio_table(
            "\nCUDA graphs (no host overhead):\n| shape | dtype | CK w target warps | mamba fwd | ours fwd | ratio | mamba f+b | ours f+b | ratio |",
            rows, cks, "mamba_{}_graph_ms", "ck{}_{}_graph_ms",
        )  # fmt: skip


def ratio_table(header, rows, cks, theirs, ours):
    """Print ours vs mamba-ssm's forward and forward+backward per row and variant; ``theirs`` /
    ``ours``: the row keys, ``{}`` for the variant then "fwd" / "fb"."""
    print(header)
    for r in rows:
        for ck in cks:
            if ours.format(ck, "fwd") not in r:
                continue
            mf = r.get(theirs.format("fwd"), float("nan"))
            mfb = r.get(theirs.format("fb"), float("nan"))
            of, ofb = r[ours.format(ck, "fwd")], r[ours.format(ck, "fb")]
            print(
                f"| {r['shape']} | {r['dtype']} | {ck} | {mf:.3f} | {of:.3f} | {of / mf:.2f} | "
                f"{mfb:.3f} | {ofb:.3f} | {ofb / mfb:.2f} |"
            )


if __name__ == "__main__":
    main()
