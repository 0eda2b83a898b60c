"""Seeded randomized differential tests: ``selective_scan``, ``linear_scan`` and
``selective_state_update`` against their float64 references over random shapes, memory layouts
(transposed storage, storage offsets, strided slices), zero-stride broadcast views, optional
arguments and dtypes. Each case draws everything from its own seed; a failure names the seed and
the case, so ``_selective_scan_case(seed)`` (etc.) reproduces it alone.

The default suite runs a few hundred cases; ``slow`` runs ten times as many."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

import ssmscan
from ssmscan.ops.linear_scan.reference import linear_scan_reference
from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.ops.selective_state_update.reference import selective_state_update_reference
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs

DTYPES = [torch.float32, torch.float32, torch.bfloat16, torch.float16, torch.float64]
CHUNKS = 8  # parametrized chunks, so that pytest-xdist spreads the cases


def relayout(t: torch.Tensor, rng: random.Random, allow_broadcast: bool = False) -> torch.Tensor:
    """``t``'s values in another memory layout: contiguous, transposed storage, a storage offset,
    a strided slice of a larger buffer, or (when allowed and some dim is 1 in the values) a
    zero-stride view. Values are unchanged."""
    kind = rng.choice(["contiguous", "transposed", "offset", "strided"])
    if t.dim() >= 2 and kind == "transposed":
        d0, d1 = rng.sample(range(t.dim()), 2)
        return t.transpose(d0, d1).contiguous().transpose(d0, d1)
    if kind == "offset":
        buf = torch.empty(t.numel() + 3, dtype=t.dtype)
        view = buf[3:].view(t.shape)
        view.copy_(t)
        return view
    if kind == "strided" and t.dim() >= 1:
        big = torch.empty((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype)
        view = big[..., ::2]
        view.copy_(t)
        return view
    return t.contiguous()


def broadcast_rows(t: torch.Tensor, dim: int) -> torch.Tensor:
    """A zero-stride view along ``dim`` whose values repeat the first row."""
    return t.narrow(dim, 0, 1).expand(t.shape)


def _selective_scan_case(seed: int):
    rng = random.Random(seed)
    dtype = rng.choice(DTYPES)
    batch, L, N = rng.randint(1, 3), rng.choice([1, 2, 7, 16, 33, 64]), rng.choice([1, 3, 4, 8, 16])
    groups = rng.choice([None, None, 1, 2])
    dim = rng.randint(1, 6) * (groups or 1)
    opts = {k: rng.random() < 0.6 for k in ("has_D", "has_z", "has_delta_bias", "delta_softplus")}
    opts["has_initial_state"] = rng.random() < 0.4
    kw = make_selective_scan_inputs(batch, dim, L, N, groups, dtype=dtype, seed=seed, **opts)
    for name in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state"):
        t = kw.get(name)
        if t is None:
            continue
        if name in ("B", "C") and rng.random() < 0.2:
            t = broadcast_rows(t, 0)  # the same B / C for every batch entry
        if name == "A" and rng.random() < 0.2:
            t = broadcast_rows(t, 0)  # one A row for every channel
        kw[name] = relayout(t, rng)
    grad = dtype in (torch.float32, torch.float64) and rng.random() < 0.5
    desc = f"seed={seed} {dtype} B{batch} D{dim} L{L} N{N} G{groups} {opts} grad={grad}"
    return kw, dtype, grad, desc


def check_selective_scan(seed: int) -> None:
    kw, dtype, grad, desc = _selective_scan_case(seed)
    names = [k for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")]
    names = [k for k in names if kw.get(k) is not None]
    ins = {k: kw[k].detach().clone().requires_grad_(grad) if grad else kw[k] for k in names}
    ref_ins = {k: kw[k].detach().to(torch.float64).requires_grad_(grad) for k in names}
    flag = kw["delta_softplus"]
    out, last = ssmscan.selective_scan(**ins, delta_softplus=flag, return_last_state=True)
    rout, rlast = selective_scan_reference(**ref_ins, delta_softplus=flag, return_last_state=True)
    assert_close_to_reference(f"out ({desc})", out, rout, dtype)
    assert_close_to_reference(f"last state ({desc})", last, rlast, dtype)
    if grad:
        g = torch.randn(
            out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
        )
        got = torch.autograd.grad((out * g.to(out.dtype)).sum() + last.sum(), list(ins.values()))
        want = torch.autograd.grad((rout * g).sum() + rlast.sum(), list(ref_ins.values()))
        for name, a, b in zip(names, got, want):
            assert_close_to_reference(f"d{name} ({desc})", a, b, dtype)


def check_linear_scan(seed: int) -> None:
    rng = random.Random(seed)
    dtype = rng.choice(DTYPES)
    shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 3)))
    dim = rng.randrange(len(shape))
    shape = (*shape[:dim], rng.choice([1, 2, 9, 40]), *shape[dim + 1 :])
    g = torch.Generator().manual_seed(seed)
    a = (0.5 + 0.5 * torch.rand(shape, generator=g, dtype=torch.float64)).to(dtype)
    b = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    if len(shape) > 1 and rng.random() < 0.2:
        other = (dim + 1) % len(shape)
        a = broadcast_rows(a, other)
    a, b = relayout(a, rng), relayout(b, rng)
    init_shape = shape[:dim] + shape[dim + 1 :]
    initial = None
    if rng.random() < 0.4:
        initial = relayout(torch.randn(init_shape, generator=g, dtype=torch.float64).to(dtype), rng)
    reverse = rng.random() < 0.5
    d = dim - len(shape) if rng.random() < 0.5 else dim  # negative dims too
    desc = (
        f"seed={seed} {dtype} shape={shape} dim={d} reverse={reverse} initial={initial is not None}"
    )
    h = ssmscan.linear_scan(a, b, dim=d, reverse=reverse, initial=initial)
    r64 = None if initial is None else initial.to(torch.float64)
    ref = linear_scan_reference(
        a.to(torch.float64), b.to(torch.float64), dim=d, reverse=reverse, initial=r64
    )
    assert_close_to_reference(f"h ({desc})", h, ref, dtype)


def check_selective_state_update(seed: int) -> None:
    rng = random.Random(seed)
    dtype = rng.choice(DTYPES)
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0):
        return (scale * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)

    batch, N = rng.randint(1, 4), rng.choice([1, 4, 16])
    groups = rng.choice([None, 1, 2])
    mamba2 = rng.random() < 0.5
    indices = None
    if mamba2:
        nheads, headdim = rng.randint(1, 3) * (groups or 1), rng.choice([1, 2, 8])
        head = (nheads, headdim)
        a_head = -torch.exp(0.5 * torch.randn(nheads, generator=g, dtype=torch.float64))
        A = a_head.float()[:, None, None].expand(nheads, headdim, N)
        dt_head = F.softplus(randn(batch, nheads).to(torch.float64) - 2).to(dtype)
        dt = dt_head[:, :, None].expand(batch, nheads, headdim)
        D = torch.randn(nheads, generator=g).float()[:, None].expand(nheads, headdim)
        dt_bias = (0.1 * torch.randn(nheads, generator=g)).float()[:, None].expand(nheads, headdim)
        rows = batch + rng.randint(0, 3)
        if rng.random() < 0.7:
            perm = torch.randperm(rows, generator=g)[:batch]
            indices = perm.to(rng.choice([torch.int32, torch.int64]))
        else:
            rows = batch
    else:
        dim = rng.randint(1, 6) * (groups or 1)
        head = (dim,)
        A = relayout(
            -torch.exp(0.5 * torch.randn(dim, N, generator=g, dtype=torch.float64)).float(), rng
        )
        dt = relayout(F.softplus(randn(batch, dim).to(torch.float64) - 2).to(dtype), rng)
        D = relayout(torch.randn(dim, generator=g).float(), rng)
        dt_bias = relayout((0.1 * torch.randn(dim, generator=g)).float(), rng)
        rows = batch
    # Mamba-2's B / C are always grouped (batch, ngroups, N); Mamba-1's may be (batch, N)
    bc_shape = (batch, N) if groups is None and not mamba2 else (batch, groups or 1, N)
    B, C = relayout(randn(*bc_shape), rng), relayout(randn(*bc_shape), rng)
    x, z = relayout(randn(batch, *head), rng), relayout(randn(batch, *head), rng)
    state_dtype = rng.choice([torch.float32, dtype]) if dtype != torch.float64 else dtype
    state = relayout(torch.randn(rows, *head, N, generator=g, dtype=torch.float64), rng)
    state = state.to(state_dtype)
    use = {k: rng.random() < 0.6 for k in ("D", "z", "dt_bias")}
    softplus = rng.random() < 0.5
    opt = {
        "D": D if use["D"] else None,
        "z": z if use["z"] else None,
        "dt_bias": dt_bias if use["dt_bias"] else None,
    }
    desc = (
        f"seed={seed} {dtype} state {state_dtype} mamba2={mamba2} B{batch} head={head} N{N} "
        f"G{groups} rows={rows} indices={indices is not None} {use} softplus={softplus}"
    )
    ref_args = [t.to(torch.float64) for t in (state, x, dt, A, B, C)]
    ref_opt = {k: None if v is None else v.to(torch.float64) for k, v in opt.items()}
    rout, rstate = selective_state_update_reference(
        *ref_args, **ref_opt, dt_softplus=softplus, state_batch_indices=indices
    )
    out = ssmscan.selective_state_update(
        state, x, dt, A, B, C, **opt, dt_softplus=softplus, state_batch_indices=indices
    )
    assert_close_to_reference(f"out ({desc})", out, rout, dtype)
    assert_close_to_reference(f"state ({desc})", state, rstate, state_dtype)


CHECKS = {
    "selective_scan": check_selective_scan,
    "linear_scan": check_linear_scan,
    "selective_state_update": check_selective_state_update,
}


def _run(op: str, seeds: range) -> None:
    torch.manual_seed(0)
    for seed in seeds:
        CHECKS[op](seed)


@pytest.mark.parametrize("chunk", range(CHUNKS), ids=lambda c: f"chunk{c}")
@pytest.mark.parametrize("op", list(CHECKS))
def test_fuzz(op, chunk):
    per_chunk = 12  # 3 ops x 8 chunks x 12 = 288 cases
    _run(op, range(chunk * per_chunk, (chunk + 1) * per_chunk))


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS), ids=lambda c: f"chunk{c}")
@pytest.mark.parametrize("op", list(CHECKS))
def test_fuzz_more(op, chunk):
    per_chunk = 120
    start = 10_000 + chunk * per_chunk
    _run(op, range(start, start + per_chunk))
