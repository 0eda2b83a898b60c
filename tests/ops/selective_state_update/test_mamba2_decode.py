"""Mamba-2's decode layout of ``selective_state_update``: state (rows, nheads, headdim, N), per-head
A / dt / D / dt_bias expanded over headdim, B / C (batch, ngroups, N), ``state_batch_indices``.

The oracle is the recurrence written out per head in float64, k steps in a row:
h_t = exp(dt A) h + dt x B, y = C h + D x, out = y silu(z), on the state row each entry picks
(a negative index: a padding entry, output zero, no row touched)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

import ssmscan
from ssmscan.ops.selective_state_update.reference import selective_state_update_reference
from ssmscan.testing import assert_close_to_reference

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _inputs(batch, nheads, headdim, N, ngroups, k, dtype, rows, seed=0, device="cpu"):
    """k steps of decode inputs. Per-head values (a, dt, d, bias) are also returned unexpanded
    for the oracle."""
    g = torch.Generator().manual_seed(seed)
    pdt = torch.float64 if dtype == torch.float64 else torch.float32

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    per_head = dict(
        a=-torch.exp(0.5 * randn(nheads)).to(pdt),
        d=randn(nheads).to(pdt),
        bias=(0.5 * randn(nheads) - 2.0).to(pdt),
        dt=(0.5 * randn(k, batch, nheads) - 2.0).to(dtype),
    )
    steps = dict(
        x=randn(k, batch, nheads, headdim).to(dtype),
        z=randn(k, batch, nheads, headdim).to(dtype),
        B=randn(k, batch, ngroups, N).to(dtype),
        C=randn(k, batch, ngroups, N).to(dtype),
    )
    state = (0.5 * randn(rows, nheads, headdim, N)).to(pdt)
    move = {k_: v.to(device) for k_, v in per_head.items()}
    return state.to(device), move, {k_: v.to(device) for k_, v in steps.items()}


def _step_args(per_head, steps, t, headdim, N):
    """mamba-ssm's / transformers' decode arguments for step t (expanded per-head views)."""
    nheads = per_head["a"].shape[0]
    return dict(
        x=steps["x"][t],
        dt=per_head["dt"][t][..., None].expand(-1, -1, headdim),
        A=per_head["a"][:, None, None].expand(nheads, headdim, N),
        B=steps["B"][t],
        C=steps["C"][t],
        D=per_head["d"][:, None].expand(nheads, headdim),
        z=steps["z"][t],
        dt_bias=per_head["bias"][:, None].expand(nheads, headdim),
        dt_softplus=True,
    )


def _recurrence64(state, per_head, steps, idx):
    """The recurrence per head, per batch entry, in float64: (outs (k, batch, nheads, headdim),
    final state)."""
    h = state.double().clone()
    a, d, bias = (per_head[n].double() for n in ("a", "d", "bias"))
    k, batch, nheads, _ = steps["x"].shape
    heads_per_group = nheads // steps["B"].shape[2]
    grp = torch.arange(nheads, device=h.device) // heads_per_group
    outs = torch.zeros(steps["x"].shape, dtype=torch.float64, device=h.device)
    for t in range(k):
        dt = F.softplus(per_head["dt"][t].double() + bias)  # (batch, nheads)
        for b in range(batch):
            r = int(idx[b])
            if r < 0:
                continue
            x = steps["x"][t, b].double()  # (nheads, headdim)
            Bh = steps["B"][t, b].double()[grp]  # (nheads, N)
            Ch = steps["C"][t, b].double()[grp]
            decay = torch.exp(dt[b] * a)[:, None, None]
            h[r] = decay * h[r] + (dt[b][:, None] * x)[..., None] * Bh[:, None, :]
            y = (h[r] * Ch[:, None, :]).sum(-1) + d[:, None] * x
            outs[t, b] = y * F.silu(steps["z"][t, b].double())
    return outs, h


LAYOUTS = [
    # batch, nheads, headdim, N, ngroups, rows, indices (None: row b for entry b)
    pytest.param(2, 4, 3, 5, 2, 2, None, id="B2-H4-P3-N5-G2"),
    pytest.param(3, 2, 8, 16, 1, 5, [4, -1, 0], id="B3-H2-P8-N16-G1-rows5-pad"),
    pytest.param(2, 6, 5, 4, 3, 3, [1, 2], id="B2-H6-P5-N4-G3-rows3"),
]


@pytest.mark.parametrize("batch,nheads,headdim,N,ngroups,rows,indices", LAYOUTS)
def test_reference_k_steps_match_recurrence(batch, nheads, headdim, N, ngroups, rows, indices):
    k = 4
    state, per_head, steps = _inputs(batch, nheads, headdim, N, ngroups, k, torch.float64, rows)
    idx = torch.tensor(indices) if indices is not None else None
    want_out, want_h = _recurrence64(
        state, per_head, steps, idx if idx is not None else range(batch)
    )
    h = state
    for t in range(k):
        out, h = selective_state_update_reference(
            h, **_step_args(per_head, steps, t, headdim, N), state_batch_indices=idx
        )
        assert_close_to_reference(f"out[{t}]", out, want_out[t], torch.float64)
    assert_close_to_reference("state", h, want_h, torch.float64)


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("batch,nheads,headdim,N,ngroups,rows,indices", LAYOUTS)
def test_cpu_k_steps_in_place(batch, nheads, headdim, N, ngroups, rows, indices, dtype):
    """``ssmscan.selective_state_update`` on CPU, float32 state, k steps in place."""
    k = 3
    state, per_head, steps = _inputs(batch, nheads, headdim, N, ngroups, k, dtype, rows, seed=1)
    idx = torch.tensor(indices) if indices is not None else None
    want_out, want_h = _recurrence64(
        state, per_head, steps, idx if idx is not None else range(batch)
    )
    h = state.clone()
    for t in range(k):
        out = ssmscan.selective_state_update(
            h, **_step_args(per_head, steps, t, headdim, N), state_batch_indices=idx
        )
        assert out.dtype == dtype and out.shape == (batch, nheads, headdim)
        assert_close_to_reference(f"out[{t}]", out, want_out[t], dtype)
    assert_close_to_reference("state", h, want_h, dtype)
    if idx is not None:  # rows no entry picks are untouched, bit for bit
        untouched = sorted(set(range(rows)) - set(indices))
        assert torch.equal(h[untouched], state[untouched])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_cpu_state_in_low_precision(dtype):
    """A state in x's dtype (transformers' cache of a bf16 model): one step against the float64
    reference on the same rounded inputs."""
    state, per_head, steps = _inputs(3, 4, 4, 8, 2, 1, dtype, 4, seed=2)
    state = state.to(dtype)
    args = _step_args(per_head, steps, 0, 4, 8)
    idx = torch.tensor([2, 0, -1])
    r_out, r_h = selective_state_update_reference(
        state.double(),
        **{k: v.double() if isinstance(v, torch.Tensor) else v for k, v in args.items()},
        state_batch_indices=idx,
    )
    h = state.clone()
    out = ssmscan.selective_state_update(h, **args, state_batch_indices=idx)
    assert h.dtype == dtype
    assert_close_to_reference("out", out, r_out, dtype)
    assert_close_to_reference("state", h, r_h, dtype)


STRIDED = [
    # batch, nheads, headdim, N, ngroups, dtype; 16 x 8 x 64 x 128 = 2^20 state elements is
    # large enough for the CPU kernel to split the batch over threads
    pytest.param(3, 4, 5, 7, 2, torch.float64, id="B3-H4-P5-N7-G2-fp64"),
    pytest.param(16, 8, 64, 128, 1, torch.float32, id="B16-H8-P64-N128-G1-fp32-threads"),
]


@pytest.mark.parametrize("path", ["eager", "inplace-op"])
@pytest.mark.parametrize("batch,nheads,headdim,N,ngroups,dtype", STRIDED)
def test_cpu_dense_per_channel_parameters(batch, nheads, headdim, N, ngroups, dtype, path):
    """A, dt, D, dt_bias varying over headdim (and A over N, read through a transposed view), the
    state a slice of a wider cache along N: every stride the CPU kernel reads, against the
    float64 reference."""
    g = torch.Generator().manual_seed(5)
    pdt = torch.float64 if dtype == torch.float64 else torch.float32

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    wide = (0.5 * randn(batch, nheads, headdim, N + 3)).to(pdt)
    state = wide[..., 1 : N + 1]  # N contiguous, rows and heads strided
    args = dict(
        x=randn(batch, nheads, headdim).to(dtype),
        dt=(0.5 * randn(batch, nheads, headdim) - 2.0).to(dtype),
        A=(-torch.exp(0.5 * randn(nheads, N, headdim))).to(pdt).transpose(1, 2),
        B=randn(batch, ngroups, N).to(dtype),
        C=randn(batch, ngroups, N).to(dtype),
        D=randn(nheads, headdim).to(pdt),
        z=randn(batch, nheads, headdim).to(dtype),
        dt_bias=(0.5 * randn(nheads, headdim) - 2.0).to(pdt),
    )
    r_out, r_h = selective_state_update_reference(
        state.double(), **{k: v.double() for k, v in args.items()}, dt_softplus=True
    )
    before = wide.clone()
    if path == "eager":
        out = ssmscan.selective_state_update(state, **args, dt_softplus=True)
    else:
        a = args
        out = torch.ops.ssmscan.selective_state_update_(
            state, a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], a["z"], a["dt_bias"], True
        )
    assert_close_to_reference("out", out, r_out, dtype)
    assert_close_to_reference("state", state, r_h, dtype)
    assert torch.equal(wide[..., 0], before[..., 0]) and torch.equal(
        wide[..., -2:], before[..., -2:]
    )


def test_opcheck_mamba2_layout():
    state, per_head, steps = _inputs(3, 4, 3, 5, 2, 1, torch.float32, 4)
    args = _step_args(per_head, steps, 0, 3, 5)
    for rows, idx in ((state[:3], None), (state, torch.tensor([3, -1, 1]))):
        torch.library.opcheck(
            torch.ops.ssmscan.selective_state_update.default,
            (rows, *args.values(), idx),
            test_utils=("test_schema", "test_faketensor"),
        )


def test_opcheck_inplace_op():
    """The eager path's in-place op: schema (it mutates ``state`` and nothing else), fake."""
    state, per_head, steps = _inputs(3, 4, 3, 5, 2, 1, torch.float32, 4)
    args = _step_args(per_head, steps, 0, 3, 5)
    for rows, idx in ((state[:3], None), (state, torch.tensor([3, -1, 1]))):
        torch.library.opcheck(
            torch.ops.ssmscan.selective_state_update_.default,
            (rows.clone(), *args.values(), idx),
            test_utils=("test_schema", "test_faketensor"),
        )


def test_eager_writes_picked_rows_in_place():
    """Eager ``selective_state_update`` writes the picked rows of the cache it is given (a strided
    slice of a larger one) and nothing else: no copy of the cache is made and returned."""
    state, per_head, steps = _inputs(3, 4, 3, 5, 2, 1, torch.float32, 6, seed=4)
    idx = torch.tensor([5, -1, 2])
    _, want_h = _recurrence64(state, per_head, steps, idx)
    cache = torch.zeros(2, *state.shape)
    cache[1] = state
    view = cache[1, :, :, :, :]
    ssmscan.selective_state_update(
        view, **_step_args(per_head, steps, 0, 3, 5), state_batch_indices=idx
    )
    assert_close_to_reference("state", cache[1], want_h, torch.float32)
    assert torch.equal(cache[1, [0, 1, 3, 4]], state[[0, 1, 3, 4]])
    assert torch.equal(cache[0], torch.zeros_like(cache[0]))


@pytest.mark.parametrize(
    "dynamic",
    [False, pytest.param(True, marks=pytest.mark.slow)],
    ids=["static", "dynamic"],
)
def test_cpu_compile_fullgraph(dynamic):
    batch, nheads, headdim, N = 3, 4, 3, 5
    state, per_head, steps = _inputs(batch, nheads, headdim, N, 2, 1, torch.float32, 5)
    idx = torch.tensor([4, -1, 1])
    want_out, want_h = _recurrence64(state, per_head, steps, idx)

    def decode(state, x, a, dt, B, C, d, z, bias, idx):
        out = ssmscan.selective_state_update(
            state,
            x,
            dt[..., None].expand(-1, -1, headdim),
            a[:, None, None].expand(-1, headdim, N),
            B,
            C,
            d[:, None].expand(-1, headdim),
            z,
            bias[:, None].expand(-1, headdim),
            True,
            idx,
        )
        return out * 2

    h = state.clone()
    got = torch.compile(decode, fullgraph=True, dynamic=dynamic)(
        h,
        steps["x"][0],
        per_head["a"],
        per_head["dt"][0],
        steps["B"][0],
        steps["C"][0],
        per_head["d"],
        steps["z"][0],
        per_head["bias"],
        idx,
    )
    assert_close_to_reference("out", got / 2, want_out[0], torch.float32)
    assert_close_to_reference("state", h, want_h, torch.float32)


class _Decoder(torch.nn.Module):
    """A Mamba-2 mixer's decode step with its state cache as a buffer, updated in place."""

    def __init__(self, rows, nheads, headdim, N):
        super().__init__()
        self.headdim, self.N = headdim, N
        self.register_buffer("cache", torch.zeros(rows, nheads, headdim, N))

    def forward(self, x, a, dt, B, C, d, z, bias, idx):
        P, N = self.headdim, self.N
        return ssmscan.selective_state_update(
            self.cache,
            x,
            dt[..., None].expand(-1, -1, P),
            a[:, None, None].expand(-1, P, N),
            B,
            C,
            d[:, None].expand(-1, P),
            z,
            bias[:, None].expand(-1, P),
            True,
            idx,
        )


def test_export_module_updating_its_cache():
    batch, nheads, headdim, N, rows = 3, 4, 3, 5, 5
    state, per_head, steps = _inputs(batch, nheads, headdim, N, 2, 2, torch.float32, rows)
    idx = torch.tensor([4, -1, 1])
    want_out, want_h = _recurrence64(state, per_head, steps, idx)

    def args(t):
        p, s = per_head, steps
        return (s["x"][t], p["a"], p["dt"][t], s["B"][t], s["C"][t], p["d"], s["z"][t])

    example = (*args(0), per_head["bias"], idx)
    ep = torch.export.export(_Decoder(rows, nheads, headdim, N), example)
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.ssmscan.selective_state_update.default) == 1
    mod = ep.module()
    mod.cache.copy_(state)
    for t in range(2):
        out = mod(*args(t), per_head["bias"], idx)
        assert_close_to_reference(f"out[{t}]", out, want_out[t], torch.float32)
    assert_close_to_reference("state", mod.cache, want_h, torch.float32)


class _Step(torch.nn.Module):
    def forward(self, state, x, dt, A, B, C, D, z, dt_bias, idx):
        return torch.ops.ssmscan.selective_state_update(
            state, x, dt, A, B, C, D, z, dt_bias, True, idx
        )


def test_exported_step_decomposes_to_aten():
    """``decompose_selective_scan`` replaces the Mamba-2 step (picked rows, a padding entry) by
    aten ops with the same results."""
    from ssmscan.passes import decompose_selective_scan

    state, per_head, steps = _inputs(3, 4, 3, 5, 2, 1, torch.float32, 5)
    args = (state, *_step_args(per_head, steps, 0, 3, 5).values())
    args = (*args[:9], torch.tensor([4, -1, 1]))
    ep = torch.export.export(_Step(), args)
    want = _Step()(*args)
    assert decompose_selective_scan(ep, "loop").changed
    targets = {str(n.target) for n in ep.graph_module.graph.nodes if n.op == "call_function"}
    assert not any("ssmscan" in t for t in targets), targets
    for name, got, ref in zip(("out", "state"), ep.module()(*args), want, strict=True):
        assert_close_to_reference(name, got, ref, torch.float32)


def _poisoned(t):
    return torch.full_like(t, float("nan"), memory_format=torch.contiguous_format)


TRITON_CASES = [
    *LAYOUTS,
    pytest.param(1, 3, 40, 16, 3, 1, None, id="B1-H3-P40-N16-G3"),
]


@pytest.mark.triton
@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)",
)
@pytest.mark.parametrize("inplace", [False, True], ids=["functional", "inplace"])
@pytest.mark.parametrize("batch,nheads,headdim,N,ngroups,rows,indices", TRITON_CASES)
def test_triton_interpreter_k_steps(batch, nheads, headdim, N, ngroups, rows, indices, inplace):
    """The kernel on expanded views and a strided state (a slice of a larger cache), k steps;
    outputs NaN-poisoned; ``new_state`` a fresh tensor (holding a copy of the state where rows
    are picked, as the functional op passes it) or the state itself (the in-place op)."""
    from ssmscan.ops.selective_state_update import triton_fwd

    k = 2
    state, per_head, steps = _inputs(batch, nheads, headdim, N, ngroups, k, torch.float32, rows)
    idx = torch.tensor(indices) if indices is not None else None
    want_out, want_h = _recurrence64(
        state, per_head, steps, idx if idx is not None else range(batch)
    )
    cache = torch.zeros(rows, 2, nheads, headdim, N)
    cache[:, 1] = state
    h = cache[:, 1]
    for t in range(k):
        args = _step_args(per_head, steps, t, headdim, N)
        out = _poisoned(args["x"])
        if inplace:
            new = h
        else:
            new = h.contiguous() if idx is not None else _poisoned(h)
        triton_fwd.launch(h, *args.values(), out, new, idx)
        assert_close_to_reference(f"out[{t}]", out, want_out[t], torch.float32)
        h = new
    assert_close_to_reference("state", h, want_h, torch.float32)
    if inplace:
        assert h.data_ptr() == cache[:, 1].data_ptr() and torch.equal(cache[:, 0], 0 * cache[:, 0])


@pytest.mark.triton
@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)",
)
def test_triton_interpreter_mamba1_layout_with_indices():
    from ssmscan.ops.selective_state_update import triton_fwd
    from ssmscan.testing import make_selective_scan_inputs

    kw = make_selective_scan_inputs(3, 8, 1, 4, groups=2, has_initial_state=True)
    rows = torch.randn(5, 8, 4)
    idx = torch.tensor([3, -1, 0])
    args = (kw["u"][..., 0], kw["delta"][..., 0], kw["A"], kw["B"][..., 0], kw["C"][..., 0])
    rest = (kw["D"], kw["z"][..., 0], kw["delta_bias"], True)
    r_out, r_h = selective_state_update_reference(
        rows.double(), *(a.double() for a in args), *(a.double() for a in rest[:3]), True, idx
    )
    out = _poisoned(args[0])
    new = rows.clone()
    triton_fwd.launch(rows, *args, *rest, out, new, idx)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert_close_to_reference("out", out, r_out, torch.float32)
    assert_close_to_reference("state", new, r_h, torch.float32)


@pytest.mark.triton
@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)",
)
def test_triton_interpreter_index_past_last_row_writes_nothing():
    """Note [state rows]: an index the eager checks would refuse reaches the kernel only under
    compile or graph capture; it then writes no memory out of bounds and gives NaN outputs."""
    from ssmscan.ops.selective_state_update import triton_fwd

    state, per_head, steps = _inputs(2, 2, 4, 4, 1, 1, torch.float32, 2)
    args = _step_args(per_head, steps, 0, 4, 4)
    out, new = _poisoned(args["x"]), state.clone()
    triton_fwd.launch(state, *args.values(), out, new, torch.tensor([1, 2]))
    assert torch.isnan(out[1]).all() and not torch.isnan(out[0]).any()
    assert torch.equal(new[0], state[0]) and not torch.equal(new[1], state[1])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("batch,nheads,headdim,N,ngroups,rows,indices", TRITON_CASES)
def test_gpu_k_steps(batch, nheads, headdim, N, ngroups, rows, indices, dtype, compiled):
    k = 3
    state, per_head, steps = _inputs(
        batch, nheads, headdim, N, ngroups, k, dtype, rows, seed=3, device="cuda"
    )
    idx = torch.tensor(indices, device="cuda") if indices is not None else None
    want_out, want_h = _recurrence64(
        state, per_head, steps, idx if idx is not None else range(batch)
    )
    fn = ssmscan.selective_state_update
    if compiled:
        torch.compiler.reset()  # one compile per case, not the recompile limit over the grid
        fn = torch.compile(fn, fullgraph=True)
    h = state.clone()
    for t in range(k):
        out = fn(h, **_step_args(per_head, steps, t, headdim, N), state_batch_indices=idx)
        assert_close_to_reference(f"out[{t}]", out, want_out[t], dtype)
    assert_close_to_reference("state", h, want_h, dtype)
