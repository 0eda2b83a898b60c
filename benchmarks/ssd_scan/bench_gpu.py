"""GPU benchmark of the SSD scan: ssmscan's Triton kernels, mamba-ssm's
``mamba_chunk_scan_combined`` and flash-linear-attention's ``chunk_simple_gla`` side by side.

Shapes are (batch, L, nheads, headdim, ngroups, dstate). Two problems:

* ``full``: Mamba-2's layer as mamba-ssm runs it (z, D per head, dt_bias, softplus): ssmscan
  and mamba-ssm (its chunk 256, what Mamba-2 models use);
* ``core``: the bare recurrence (no z, D, bias or softplus; positive dt), which is what
  ``chunk_simple_gla`` computes (q = C, k = B, v = dt x, g = dt A, scale 1, the heads' copies of
  B and C made inside the timed call): all three.

``--plans NAME=field:value,...`` adds ours by the planner's plan changed so (``ssmscan[NAME]``,
launched directly through its own autograd function; the plan fields are
``ssmscan.ops.ssd_scan.plan.SSDPlan``'s; a name ending in ``-tf32`` allows TF32 as
``ssmscan-tf32`` does): the way a planner decision is re-timed. ``--anchors`` (none) leaves the
other libraries out of such a sweep.

float32 inputs: ours at PyTorch's default float32 matmul precision (3xTF32, the float32
tolerance) and as ``ssmscan-tf32``, where the caller allows TF32 as mamba-ssm's kernels always use
it (``torch.set_float32_matmul_precision("high")``; float16's tolerance, a 10-bit mantissa).

An anchor's autotuning runs at the timed shape, afresh for each shape (``retune_at``), before
anything else calls it.

Correctness first: every variant runs once at batch 1 of the shape and its output, final state
(where it returns one) and every gradient are compared with autograd of the float64 chunked
reference (``ssd_scan_chunked_reference``, equal to the sequential one to 1e-15) on the same
inputs. ssmscan beyond ``tolerance(dtype) * --tol-factor`` is reported and not timed; an anchor
beyond it is timed all the same with its error in the table (the anchors are what users run
now, and mamba-ssm rounds its matmul operands to the input dtype). Times
are ``triton.testing.do_bench`` medians (ms), forward and forward+backward, taken in ``--rounds``
rounds over a shape's variants in turn (the clocks and the neighbours' load drift over a call:
one variant timed right after another is not what a variant timed alone would see); a row gives
the median of its rounds and, with two or more, their spread ((max - min) / median). Each row also gives
the fraction of the floor: max(bytes / copy bandwidth, matmul FLOPs / bf16 matmul rate), both
measured here (a device-to-device copy, a 8192³ matmul), FLOPs counted at chunk 64 for the
minimal chunked algorithm (C·Bᵀ once per group, states, read-out, intra-chunk product; the
backward counted as twice the forward).

    PYTHONPATH=src python benchmarks/ssd_scan/bench_gpu.py [--dtype bf16] [--out results.json]
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/ssd_scan/bench_gpu.py --check-only \\
        --device cpu --shapes 1,70,4,16,2,16      # the correctness gate under the interpreter

mamba-ssm comes from its unpacked sdist (``--mamba-src``, default
/tmp/mb/mamba_ssm-2.3.2.post1: only its Triton SSD modules are imported, no build needed);
flash-linear-attention from an installed ``fla`` package. Either missing is reported and
skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import statistics
import sys
import types

import torch
from torch._library.triton import set_wrap_triton_enabled

from ssmscan.ops.ssd_scan import op as _op  # noqa: F401  (registers the ops)
from ssmscan.ops.ssd_scan.reference import ssd_scan_chunked_reference
from ssmscan.testing import tolerance
from ssmscan.testing.triton_interpreter import patch_triton_interpreter_for_numpy2

SHAPES = [
    (8, 2048, 80, 64, 1, 128),  # mamba2-2.7b
    (16, 2048, 24, 64, 1, 128),  # mamba2-130m
    (2, 4096, 128, 64, 8, 128),  # Codestral-7B-like
    (1, 65536, 48, 64, 1, 128),
    (1, 256, 24, 64, 1, 128),  # batch 1, short: launch and host overhead
]
DECODE_BATCHES = (1, 16, 256)
DECODE_HEADS = (80, 64, 128)  # nheads, headdim, dstate (mamba2-2.7b), ngroups 1
DECODE_MAMBA1 = (1536, 16)  # dim, dstate (mamba-130m's inner width)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
GRADS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")


def make(batch, L, H, P, G, N, dtype, device, full, seed=0):
    """Mamba-2-like inputs: dt in [1e-3, 0.1] after bias and softplus (``full``) or as is."""
    g = torch.Generator().manual_seed(seed)

    def r(*s, dt=dtype):
        return torch.randn(*s, generator=g).to(dt).to(device)

    lo, hi = math.log(1e-3), math.log(1e-1)
    dt = torch.exp(torch.rand(batch, L, H, generator=g) * (hi - lo) + lo)
    kw = dict(x=r(batch, L, H, P), A=-torch.exp(0.5 * torch.randn(H, generator=g)).to(device),
              B=r(batch, L, G, N), C=r(batch, L, G, N))  # fmt: skip
    if full:
        bias = torch.exp(torch.rand(H, generator=g) * (hi - lo) + lo)

        def inv(y):
            return y + torch.log(-torch.expm1(-y))

        kw.update(dt=(inv(dt) - inv(bias)).to(dtype).to(device), dt_bias=inv(bias).to(device),
                  D=r(H, dt=torch.float32), z=r(batch, L, H, P))  # fmt: skip
    else:
        kw["dt"] = dt.to(dtype).to(device)
    return kw


# --- the variants: fn(kw, full) -> (out, final or None), differentiable ------------------------


def ours(kw, full):
    x = kw["x"]
    if x.is_cuda:
        return torch.ops.ssmscan.ssd_scan_fwd(
            x, kw["dt"], kw["A"], kw["B"], kw["C"], kw.get("D"), kw.get("z"), kw.get("dt_bias"),
            None, None, full, 0.0, float("inf"), 64,
        )  # fmt: skip
    return _Launchers.apply(x, kw["dt"], kw["A"], kw["B"], kw["C"], kw.get("D"), kw.get("z"),
                            kw.get("dt_bias"), full, None)  # fmt: skip


def _tf32(name):
    """Whether a variant of ours allows TF32: "ssmscan-tf32", and ``--plans`` names ending so
    ("ssmscan[p16-tf32]")."""
    return name.startswith("ssmscan") and name.rstrip("]").endswith("-tf32")


@contextlib.contextmanager
def _matmul_precision(name):
    """float32 matmul precision for a variant's check and timing: ours where the caller allows
    TF32 (``_tf32``) runs under ``torch.set_float32_matmul_precision("high")``, forward and
    backward; every other variant at the process's setting ("highest")."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if _tf32(name) else before)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


class _Launchers(torch.autograd.Function):
    """The launchers called directly by a plan (None: the planner's): on CPU tensors under
    Triton's interpreter (the op's CPU path is the C kernel), and for ``--plans`` variants.
    They launch as the op's eager body does, with ``wrap_triton`` disabled: enabled, every eager
    launch goes through its higher-order-op dispatch instead of the launch cache (Note [eager
    launch cache]), host time the op does not spend."""

    @staticmethod
    def forward(ctx, x, dt, A, B, C, D, z, dt_bias, full, plan):
        from ssmscan.ops.ssd_scan import triton_fwd

        ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias)
        ctx.full, ctx.plan = full, plan
        with set_wrap_triton_enabled(False):
            return triton_fwd.forward(x, dt, A, B, C, D, z, dt_bias, None, None, full, 0.0,
                                      float("inf"), plan)  # fmt: skip

    @staticmethod
    def backward(ctx, dout, dfinal):
        from ssmscan.ops.ssd_scan import triton_bwd

        x, dt, A, B, C, D, z, dt_bias = ctx.saved_tensors
        with set_wrap_triton_enabled(False):
            dx, ddt, dA, dB, dC, opt = triton_bwd.backward(
                dout.contiguous(), dfinal, x, dt, A, B, C, D, z, dt_bias, None, None, ctx.full,
                0.0, float("inf"), ctx.plan,
            )  # fmt: skip
        rest = iter(opt)
        return (dx, ddt, dA, dB, dC, *(next(rest) if t is not None else None
                                       for t in (D, z, dt_bias)), None, None)  # fmt: skip


def parse_plan_changes(spec):
    """``"name=field:value,field:value"`` -> (name, {field: value}) for ``dataclasses.replace``
    of the planner's ``SSDPlan``: ints, ``true`` / ``false``, else strings; an unknown field is
    refused with the plan's fields."""
    from ssmscan.ops.ssd_scan.plan import SSDPlan

    name, sep, body = spec.partition("=")
    fields = {f.name for f in dataclasses.fields(SSDPlan)}
    changes = {}
    for item in body.split(",") if sep and body else ():
        key, _, value = item.partition(":")
        if key not in fields:
            raise SystemExit(f"--plans {spec!r}: {key!r} is not an SSDPlan field; "
                             f"fields: {', '.join(sorted(fields))}")  # fmt: skip
        low = value.lower()
        changes[key] = (low == "true" if low in ("true", "false")
                        else int(value) if value.lstrip("-").isdigit() else value)  # fmt: skip
    if not name or not changes:
        raise SystemExit(f"--plans {spec!r}: expected NAME=field:value[,field:value ...]")
    return name, changes


def ours_planned(changes):
    """ours with the planner's plan for the call changed by ``changes``, forward and backward."""
    from ssmscan.ops.ssd_scan.plan import plan_for

    def run(kw, full):
        x = kw["x"]
        plan = dataclasses.replace(plan_for(x, kw["B"]), **changes)
        return _Launchers.apply(x, kw["dt"], kw["A"], kw["B"], kw["C"], kw.get("D"), kw.get("z"),
                                kw.get("dt_bias"), full, plan)  # fmt: skip

    return run


def _mamba_package(src):
    """Make ``mamba_ssm`` importable from its sdist without its package __init__."""
    if "mamba_ssm" not in sys.modules:
        pkg = types.ModuleType("mamba_ssm")
        pkg.__path__ = [os.path.join(src, "mamba_ssm")]
        sys.modules["mamba_ssm"] = pkg


def mamba_fn(src):
    """mamba-ssm's ``mamba_chunk_scan_combined`` from its sdist, without its package __init__
    (which imports the CUDA extensions); None (and why) when it cannot be imported."""
    try:
        _mamba_package(src)
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except Exception as e:  # reported, not fatal: the benchmark times the others
        return None, f"{type(e).__name__}: {e}"

    def run(kw, full):
        return mamba_chunk_scan_combined(
            kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], 256, D=kw.get("D"), z=kw.get("z"),
            dt_bias=kw.get("dt_bias"), dt_softplus=full, return_final_states=True,
        )  # fmt: skip

    return run, None


def fla_fn():
    try:
        from fla.ops.simple_gla import chunk_simple_gla
    except Exception as e:  # reported, not fatal
        return None, f"{type(e).__name__}: {e}"

    def run(kw, full):
        assert not full, "chunk_simple_gla has no z / D / softplus"
        x, dt, B, C = kw["x"], kw["dt"], kw["B"], kw["C"]
        rep = x.shape[2] // B.shape[2]
        q = C.repeat_interleave(rep, dim=2)
        k = B.repeat_interleave(rep, dim=2)
        v = x * dt[..., None]
        g = (dt.float() * kw["A"]).to(torch.float32)
        o, final = chunk_simple_gla(q=q, k=k, v=v, g=g, scale=1.0, output_final_state=True)
        return o, final.transpose(-1, -2)  # (b, h, K=dstate, V=headdim) -> ours

    return run, None


# --- correctness gate ---------------------------------------------------------------------------


def _leaves(kw):
    return {k: (v.detach().clone().requires_grad_() if v.is_floating_point() else v)
            for k, v in kw.items()}  # fmt: skip


def _rel(a, r):
    a, r = a.detach().double().cpu(), r.detach().double().cpu()
    if torch.isnan(a).any():
        return float("inf")
    return ((a - r).abs().max() / r.abs().max().clamp_min(1e-300)).item()


def gate(fn, kw, full, dtype, factor):
    """(worst relative error over out, final state and every gradient, its name, whether it is
    within tolerance, why the backward could not run or None). A backward that raises (an
    anchor's, refusing this Triton or GPU) leaves the forward checked alone."""
    ref_in = {k: v.detach().double().requires_grad_() for k, v in kw.items()}
    r_out, r_final = ssd_scan_chunked_reference(
        ref_in["x"], ref_in["dt"], ref_in["A"], ref_in["B"], ref_in["C"], 64, D=ref_in.get("D"),
        z=ref_in.get("z"), dt_bias=ref_in.get("dt_bias"), dt_softplus=full,
    )  # fmt: skip
    g = torch.Generator().manual_seed(7)
    dout = torch.randn(r_out.shape, generator=g, dtype=torch.float64)
    dfin = torch.randn(r_final.shape, generator=g, dtype=torch.float64)
    leaves = _leaves(kw)
    out, final = fn(leaves, full)
    # the reference's output gradients are the ones the variant gets, rounded to its dtypes: the
    # gradients' own rounding is not the kernels' error (dD, a sum with cancellation, moved 2.4%
    # with a bfloat16 dout at L = 37)
    dout = dout.to(out.dtype)
    outs, grads = [out], [dout.to(out.device)]
    r_outs, r_grads_in = [r_out], [dout.double().to(r_out.device)]
    if final is not None:
        dfin = dfin.to(final.dtype)
        outs.append(final)
        grads.append(dfin.to(final.device))
        r_outs.append(r_final)
        r_grads_in.append(dfin.double().to(r_final.device))
    names = [k for k in GRADS if k in kw]
    errs = {"out": _rel(out, r_out)}
    if final is not None:
        errs["final"] = _rel(final, r_final)
    bwd_error = None
    try:
        got = torch.autograd.grad(outs, [leaves[k] for k in names], grads, allow_unused=True)
    except RuntimeError as e:
        bwd_error = f"{type(e).__name__}: {str(e)[:160]}"
    if bwd_error is None:
        want = torch.autograd.grad(r_outs, [ref_in[k] for k in names], r_grads_in)
        for k, a, r in zip(names, got, want):
            errs["d" + k] = _rel(a, r) if a is not None else float("inf")
    worst = max(errs, key=errs.get)
    return errs[worst], worst, errs[worst] <= tolerance(dtype) * factor, bwd_error


# --- timing ---------------------------------------------------------------------------------------


def retune_at(fn, kw, full, packages=("mamba_ssm", "fla")):
    """An anchor's Triton autotuning redone at ``kw``'s shape: its autotuners' caches cleared,
    then one forward and backward (a backward that raises is left to the gate). mamba-ssm's
    autotuners key on the head geometry and chunk, not on batch or L, so whichever call comes
    first picks the configuration every later call keeps: the batch-1 gate, or an earlier
    shape of the same head geometry."""
    import triton

    for name, mod in list(sys.modules.items()):
        if name.split(".")[0] in packages:
            for v in list(vars(mod).values()):
                if isinstance(v, triton.runtime.autotuner.Heuristics):
                    v = v.fn
                if isinstance(v, triton.runtime.autotuner.Autotuner):
                    v.cache.clear()
    leaves = _leaves(kw)
    out, _ = fn(leaves, full)
    with contextlib.suppress(RuntimeError):
        out.backward(torch.randn_like(out))
    if out.is_cuda:
        torch.cuda.synchronize()


def ceilings(dtype):
    """(copy bandwidth bytes/s, tensor-core matmul FLOP/s), measured: bf16 matmuls for 16-bit
    inputs, tf32 for float32 ones."""
    from triton.testing import do_bench

    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    bw = 2 * a.numel() / (do_bench(lambda: b.copy_(a), return_mode="median") * 1e-3)
    mdtype = torch.float32 if dtype == torch.float32 else torch.bfloat16
    m = torch.randn(8192, 8192, device="cuda", dtype=mdtype)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        rate = 2 * 8192**3 / (do_bench(lambda: m @ m, return_mode="median") * 1e-3)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return bw, rate


def floor_ms(shape, dtype, full, bw, rate, backward):
    b, L, H, P, G, N = shape
    e = torch.empty((), dtype=dtype).element_size()
    act = b * L * H * P * e  # x, out (and z)
    bc = 2 * b * L * G * N * e
    dtb = b * L * H * e
    fwd_bytes = act * (3 if full else 2) + bc + dtb
    Q = 64
    nc = -(-L // Q)
    flops = 2 * b * nc * (G * Q * Q * N + H * (2 * Q * P * N + Q * Q * P))
    bytes_, fl = (fwd_bytes * 2, flops * 3) if backward else (fwd_bytes, flops)
    return max(bytes_ / bw, fl / rate) * 1e3


def interleaved(thunks, rounds):
    """Each of ``thunks`` (name -> a function returning one time) called ``rounds`` times, in
    turn within each round; name -> (median, spread: (max - min) / median, 0 for one round).

    Example:
        >>> ticks = iter(range(100))
        >>> interleaved({"a": lambda: next(ticks), "b": lambda: next(ticks)}, 3)
        {'a': (2, 2.0), 'b': (3, 1.3333333333333333)}
    """
    times = {name: [] for name in thunks}
    for _ in range(rounds):
        for name, thunk in thunks.items():
            times[name].append(thunk())
    res = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        res[name] = (med, (max(ts) - min(ts)) / med if med else 0.0)
    return res


def _timer(fn, kw, full, backward, name):
    """A function timing ``fn`` once (``time_variant``) at ``name``'s matmul precision."""

    def timer():
        with _matmul_precision(name):
            return time_variant(fn, kw, full, backward)

    return timer


def time_variant(fn, kw, full, backward):
    from triton.testing import do_bench

    if not backward:
        with torch.no_grad():
            return do_bench(lambda: fn(kw, full), return_mode="median")
    leaves = _leaves(kw)
    params = [v for v in leaves.values() if v.requires_grad]
    dout = torch.randn_like(kw["x"])

    def step():
        out, _ = fn(leaves, full)
        out.backward(dout)

    return do_bench(step, grad_to_none=params, return_mode="median")


# --- decode step -----------------------------------------------------------------------------------


def decode_inputs(batch, dtype, device, seed=0, layout="mamba2"):
    """Mamba-2's decode layout as transformers and mamba-ssm pass it: A, dt, D and dt_bias are
    per-head values expanded over headdim (zero strides); the state is float32. ``layout``
    "mamba1": Mamba-1's (state (batch, dim, dstate), per-channel A, dt, D and dt_bias, B and C
    (batch, dstate)), as mamba-ssm's ``Mamba.step`` passes it."""
    g = torch.Generator().manual_seed(seed)

    def r(*s):
        return torch.randn(*s, generator=g).to(device)

    if layout == "mamba1":
        dim, n = DECODE_MAMBA1
        return dict(
            state=r(batch, dim, n), x=r(batch, dim).to(dtype), dt=r(batch, dim).to(dtype),
            A=-torch.exp(0.5 * r(dim, n)), B=r(batch, n).to(dtype), C=r(batch, n).to(dtype),
            D=r(dim), z=r(batch, dim).to(dtype), dt_bias=r(dim),
        )  # fmt: skip
    H, P, N = DECODE_HEADS
    return dict(
        state=r(batch, H, P, N), x=r(batch, H, P).to(dtype),
        dt=r(batch, H)[..., None].expand(batch, H, P).to(dtype),
        A=(-torch.exp(0.5 * r(H)))[:, None, None].expand(H, P, N),
        B=r(batch, 1, N).to(dtype), C=r(batch, 1, N).to(dtype),
        D=r(H)[:, None].expand(H, P), z=r(batch, H, P).to(dtype),
        dt_bias=r(H)[:, None].expand(H, P),
    )  # fmt: skip


def decode_reference(kw):
    """(out, new state) in float64; either layout (Mamba-1's as one head)."""
    if kw["state"].dim() == 3:
        one = {k: v.unsqueeze(0 if k in ("A", "D", "dt_bias") else 1) for k, v in kw.items()}
        out, state = decode_reference(one)
        return out[:, 0], state[:, 0]
    d = {k: v.double() for k, v in kw.items()}
    rep = d["x"].shape[1] // d["B"].shape[1]
    B, C = (d[k].repeat_interleave(rep, dim=1) for k in ("B", "C"))
    dt = torch.nn.functional.softplus(d["dt"] + d["dt_bias"])
    state = (
        d["state"] * torch.exp(dt[..., None] * d["A"]) + (dt * d["x"])[..., None] * B[:, :, None]
    )
    out = (state * C[:, :, None]).sum(-1) + d["D"] * d["x"]
    return out * torch.nn.functional.silu(d["z"]), state


def _ours_block_p(block_p):
    """ours in place with the decode step's planned plan changed to ``block_p`` channels a
    program."""
    from ssmscan.ops.selective_state_update import triton_fwd
    from ssmscan.ops.selective_state_update.plan import plan_state_update

    def run(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus):
        out = torch.empty_like(x)
        plan = dataclasses.replace(plan_state_update(x.shape[-1], state.shape[-1]),
                                   block_p=block_p)  # fmt: skip
        triton_fwd.launch(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, out, state,
                          plan=plan)  # fmt: skip
        return out

    return run


def decode_variants(mamba_src, block_ps=()):
    import ssmscan

    variants = {"ssmscan": (ssmscan.selective_state_update, None)}
    for bp in block_ps:
        variants[f"ssmscan[p{bp}]"] = (_ours_block_p(bp), None)
    try:
        _mamba_package(mamba_src)
        from mamba_ssm.ops.triton.selective_state_update import selective_state_update

        variants["mamba-ssm"] = (selective_state_update, None)
    except Exception as e:  # reported, not fatal
        variants["mamba-ssm"] = (None, f"{type(e).__name__}: {e}")
    return variants


def _graph_us(step):
    """(µs a step replayed from a CUDA graph, None) as a server that captures its decode loop
    runs it (no host time: ``do_bench_cudagraph`` median, several steps a graph); (None, the
    error) where the step cannot be captured."""
    from triton.testing import do_bench_cudagraph

    try:
        return do_bench_cudagraph(step, return_mode="median") * 1e3, None
    except Exception as e:  # reported in the row
        torch.cuda.synchronize()
        return None, f"{type(e).__name__}: {e}"[:200]


def bench_decode(dtype, mamba_src, layout="mamba2", block_ps=()):
    """Rows for one decode step at DECODE_BATCHES in ``layout``: checked against float64, then
    timed (do_bench median, GPU time with the launch), replayed from a CUDA graph (``_graph_us``)
    and as seen by the caller (wall time per call, synchronized); ``block_ps``: ours also at
    those channels a program."""
    import time

    from triton.testing import do_bench

    rows = []
    for name, (fn, why) in decode_variants(mamba_src, block_ps).items():
        if fn is None:
            print(f"decode {name}: not available ({why})")
            continue
        for batch in DECODE_BATCHES:
            kw = decode_inputs(batch, dtype, "cuda", seed=batch, layout=layout)
            r_out, r_state = decode_reference(kw)
            state = kw["state"].clone()
            args = {**kw, "state": state}
            out = fn(**args, dt_softplus=True)
            err = max(_rel(out, r_out), _rel(state, r_state))
            ok = err <= tolerance(dtype)
            row = dict(part="decode", layout=layout, variant=name, batch=batch, dtype=str(dtype),
                       check=err, ok=ok)  # fmt: skip
            if ok or not name.startswith("ssmscan"):

                def step(fn=fn, args=args):
                    return fn(**args, dt_softplus=True)

                row["gpu_us"] = do_bench(step, return_mode="median") * 1e3
                row["graph_us"], row["graph_error"] = _graph_us(step)
                for _ in range(20):
                    step()
                torch.cuda.synchronize()
                walls = []
                for _ in range(200):
                    t0 = time.perf_counter()
                    step()
                    torch.cuda.synchronize()
                    walls.append(time.perf_counter() - t0)
                row["wall_us"] = sorted(walls)[len(walls) // 2] * 1e6
            rows.append(row)
            print(json.dumps(row))
    print(f"\n{'decode ' + layout:<16}{'batch':>6}{'check':>10}{'gpu us':>9}{'graph us':>9}"
          f"{'wall us':>9}")  # fmt: skip
    for r in rows:
        t = "  FAILED CHECK"
        if "gpu_us" in r:
            graph = f"{r['graph_us']:9.1f}" if r["graph_us"] is not None else f"{'-':>9}"
            t = f"{r['gpu_us']:9.1f}{graph}{r['wall_us']:9.1f}"
        mark = "" if r["ok"] else " !"
        print(f"{r['variant']:<16}{r['batch']:>6}{r['check']:>10.1e}{t}{mark}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="*", default=None,
                    help="b,L,nheads,headdim,ngroups,dstate ...")  # fmt: skip
    ap.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--mamba-src", default="/tmp/mb/mamba_ssm-2.3.2.post1")
    ap.add_argument("--tol-factor", type=float, default=1.0,
                    help="gate at tolerance(dtype) times this")  # fmt: skip
    ap.add_argument("--check-only", action="store_true", help="the correctness gate, no timing")
    ap.add_argument("--rounds", type=int, default=3,
                    help="timing rounds over a shape's variants in turn; a row's time is the "
                    "median of its rounds")  # fmt: skip
    ap.add_argument("--out", default=None, help="JSON results")
    ap.add_argument("--parts", nargs="*", default=["scan", "decode"], choices=["scan", "decode"])
    ap.add_argument("--decode-layout", default="mamba2", choices=["mamba2", "mamba1"],
                    help="the decode step's layout: Mamba-2's heads or Mamba-1's channels")  # fmt: skip
    ap.add_argument("--decode-block-p", nargs="*", type=int, default=[],
                    help="ours also at these channels a program (the decode plan's block_p)")  # fmt: skip
    ap.add_argument("--anchors", nargs="*", default=["mamba-ssm", "fla"],
                    choices=["mamba-ssm", "fla"],
                    help="the other libraries timed beside ours (none: ours and --plans only)")  # fmt: skip
    ap.add_argument("--plans", nargs="*", default=[], metavar="NAME=field:value[,...]",
                    help="also time ours by the planner's plan changed so (dataclasses.replace "
                    "of SSDPlan), each checked like the rest, e.g. dx16=block_p:16")  # fmt: skip
    ap.add_argument("--problems", nargs="*", default=["full", "core"], choices=["full", "core"],
                    help="full: z, D, dt_bias, softplus (mamba-ssm's form); core: none of them "
                    "(flash-linear-attention's); each new one costs mamba-ssm an autotuning")  # fmt: skip
    a = ap.parse_args()
    if a.device == "cpu":  # the launchers under Triton's interpreter
        patch_triton_interpreter_for_numpy2()
    shapes = [tuple(int(v) for v in s.split(",")) for s in a.shapes] if a.shapes else SHAPES
    dtype = DTYPES[a.dtype]
    variants = {"ssmscan": (ours, None)}
    for spec in a.plans:
        name, changes = parse_plan_changes(spec)
        variants[f"ssmscan[{name}]"] = (ours_planned(changes), None)
    if dtype == torch.float32:  # TF32 operands: float16's tolerance (a 10-bit mantissa)
        variants["ssmscan-tf32"] = (ours, None)
    if a.device == "cuda":
        if "mamba-ssm" in a.anchors:
            variants["mamba-ssm"] = mamba_fn(a.mamba_src)
        if "fla" in a.anchors:
            variants["fla"] = fla_fn()
    for name, (fn, why) in variants.items():
        if fn is None:
            print(f"{name}: not available ({why})")
    bw = rate = None
    if not a.check_only:
        bw, rate = ceilings(dtype)
        print(f"{torch.cuda.get_device_name()}: copy {bw / 1e12:.2f} TB/s, "
              f"{'tf32' if dtype == torch.float32 else 'bf16'} matmul {rate / 1e12:.0f} TFLOP/s; "
              f"torch {torch.__version__}")  # fmt: skip
    rows = []
    for shape in shapes if "scan" in a.parts else ():
        for problem in a.problems:
            full = problem == "full"
            gate_kw = make(1, *shape[1:], dtype, a.device, full, seed=1)
            kw = make(*shape, dtype, a.device, full) if not a.check_only else None
            timed = []  # (row, fn, name, with its backward): timed after every variant's gate
            for name, (fn, _) in variants.items():
                if fn is None or (name == "fla" and full):
                    continue
                tol_dtype = torch.float16 if _tf32(name) else dtype
                try:
                    with _matmul_precision(name):
                        if kw is not None and not name.startswith("ssmscan"):
                            retune_at(fn, kw, full)
                        err, worst, ok, bwd_error = gate(fn, gate_kw, full, tol_dtype,
                                                         a.tol_factor)  # fmt: skip
                except Exception as e:  # an anchor that cannot run here: reported, not timed
                    if name.startswith("ssmscan"):
                        raise
                    row = dict(shape=shape, problem=problem, variant=name, dtype=a.dtype,
                               check="error", ok=False, error=f"{type(e).__name__}: {e}"[:200])  # fmt: skip
                    rows.append(row)
                    print(json.dumps(row))
                    continue
                if bwd_error is not None and name.startswith("ssmscan"):
                    raise SystemExit(f"ssmscan's backward failed at {shape}: {bwd_error}")
                row = dict(shape=shape, problem=problem, variant=name, dtype=a.dtype,
                           check=f"{worst} {err:.1e}", ok=ok)  # fmt: skip
                if bwd_error is not None:
                    row["bwd_error"] = bwd_error
                if (ok or not name.startswith("ssmscan")) and not a.check_only:
                    timed.append((row, fn, name, bwd_error is None))
                rows.append(row)
                if not timed or timed[-1][0] is not row:
                    print(json.dumps(row))
            thunks = {}
            for _, fn, name, both in timed:
                thunks[(name, False)] = _timer(fn, kw, full, False, name)
                if both:
                    thunks[(name, True)] = _timer(fn, kw, full, True, name)
            got = interleaved(thunks, a.rounds) if thunks else {}
            for row, _, name, both in timed:
                row["fwd_ms"], row["fwd_spread"] = got[(name, False)]
                row["fwd_floor"] = floor_ms(shape, dtype, full, bw, rate, False) / row["fwd_ms"]
                if both:
                    row["fwdbwd_ms"], row["fwdbwd_spread"] = got[(name, True)]
                    row["fwdbwd_floor"] = (floor_ms(shape, dtype, full, bw, rate, True)
                                           / row["fwdbwd_ms"])  # fmt: skip
                print(json.dumps(row))
    print(f"\n{'shape':<28}{'problem':<8}{'variant':<22}{'check':<18}{'fwd ms':>9}{'floor':>7}"
          f"{'f+b ms':>9}{'floor':>7}   ours / this")  # fmt: skip
    mine = {(r["shape"], r["problem"]): r for r in rows if r["variant"] == "ssmscan"}
    for r in rows:
        if "error" in r:
            t = f"   could not run: {r['error'][:90]}"
        elif "fwd_ms" not in r:
            t = "   (checked only)" if r["ok"] else "   FAILED CHECK: not timed"
        else:
            t = f"{r['fwd_ms']:9.3f}{r['fwd_floor']:7.2f}"
            t += (f"{r['fwdbwd_ms']:9.3f}{r['fwdbwd_floor']:7.2f}" if "fwdbwd_ms" in r
                  else f"{'-':>9}{'-':>7}")  # fmt: skip
            m = mine.get((r["shape"], r["problem"]))
            if m is not None and "fwd_ms" in m and r is not m:
                t += f"   {m['fwd_ms'] / r['fwd_ms']:.2f} / "
                t += (f"{m['fwdbwd_ms'] / r['fwdbwd_ms']:.2f}" if "fwdbwd_ms" in r
                      else "- (its backward: " + r["bwd_error"][:60] + ")")  # fmt: skip
        if r.get("fwd_spread") or r.get("fwdbwd_spread"):  # the rounds' spread, in percent
            t += f"   (spread {100 * r['fwd_spread']:.0f}%"
            t += f" / {100 * r['fwdbwd_spread']:.0f}%)" if "fwdbwd_spread" in r else ")"
        check = r["check"] + ("" if r["ok"] else " !")  # ! beyond tolerance (an anchor, timed)
        print(f"{r['shape']!s:<28}{r['problem']:<8}{r['variant']:<22}{check:<18}{t}")
    if "decode" in a.parts and a.device == "cuda" and not a.check_only:
        rows += bench_decode(dtype, a.mamba_src, a.decode_layout, a.decode_block_p)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    if not all(r["ok"] for r in rows if r["variant"].startswith("ssmscan")):
        raise SystemExit("ssmscan failed its check")


if __name__ == "__main__":
    main()
