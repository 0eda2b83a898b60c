"""Triton selective-scan kernels against the float64 reference: forward, last state, checkpoints
and every gradient, for every kernel the planner (``plan``) can choose.

``triton`` tests call the launchers directly on CPU tensors under TRITON_INTERPRET=1 (see the
conftest), each with a plan (the planner's for a ``Policy`` or fake ``DeviceFacts``), outputs from
``shapes.empty_*_outputs`` NaN-poisoned; ``gpu`` tests run the launchers and the public op on
CUDA, including torch.compile(fullgraph=True).
"""

from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch

from ssmscan.ops.common import triton_launch
from ssmscan.ops.common.launch_options import DEFAULT as DEFAULT_LAUNCH
from ssmscan.ops.common.launch_options import LaunchOptions
from ssmscan.ops.selective_scan.plan import DEFAULT, INTERPRETED, DeviceFacts, Policy
from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.ops.selective_scan.shapes import (
    CHECKPOINT_LEN,
    empty_backward_outputs,
    empty_forward_outputs,
)
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs

triton = pytest.importorskip("triton")

_ARGS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")

# (batch, dim, L, N, groups, has_D/z/bias, softplus, initial_state)
CASES = [
    pytest.param(2, 5, 1, 4, None, True, True, False, id="B2-D5-L1-N4"),
    pytest.param(1, 3, 7, 1, None, True, False, True, id="B1-D3-L7-N1-nosoftplus-init"),
    pytest.param(2, 4, 63, 4, 2, True, True, True, id="B2-D4-L63-N4-G2-init"),
    pytest.param(1, 6, 300, 4, None, False, True, False, id="B1-D6-L300-N4-bare"),
    pytest.param(
        1, 2, 2 * CHECKPOINT_LEN + 5, 3, None, True, True, True, id="B1-D2-L2CKp5-N3-init"
    ),
    # the lane forward's other geometries (Note [selective scan forward lanes]): NP = 8 (2 lanes,
    # 4 steps each), NP = 32 (8 lanes, 1 step each)
    pytest.param(1, 3, 45, 8, None, True, True, True, id="B1-D3-L45-N8-init"),
    pytest.param(2, 2, 29, 32, None, True, True, False, id="B2-D2-L29-N32"),
    # NP = 64: the 2-D forward (the lane kernel takes NP <= 32), whose state layout puts 16
    # threads on a channel (Note [selective scan forward layout]) and the 8-step tile no longer
    # matches it
    pytest.param(1, 3, 41, 33, None, True, True, True, id="B1-D3-L41-N33-init"),
]


def _inputs(batch, dim, L, N, groups, full, softplus, init, dtype, device, seed=0):
    kw = make_selective_scan_inputs(
        batch,
        dim,
        L,
        N,
        groups=groups,
        dtype=dtype,
        device=device,
        has_D=full,
        has_z=full,
        has_delta_bias=full,
        delta_softplus=softplus,
        has_initial_state=init,
        seed=seed,
    )
    g = torch.Generator().manual_seed(seed + 1)
    dout = torch.randn(batch, dim, L, generator=g, dtype=torch.float64).to(dtype).to(device)
    dlast = torch.randn(batch, dim, N, generator=g, dtype=torch.float64).to(device)
    return kw, dout, dlast.float() if dtype != torch.float64 else dlast


def _reference(kw, dout, dlast):
    """float64 outputs and gradients of every tensor input."""
    ins = {
        k: (kw[k].detach().double().requires_grad_() if kw[k] is not None else None) for k in _ARGS
    }
    out, last = selective_scan_reference(
        ins["u"],
        ins["delta"],
        ins["A"],
        ins["B"],
        ins["C"],
        ins["D"],
        ins["z"],
        ins["delta_bias"],
        kw["delta_softplus"],
        True,
        ins["initial_state"],
    )
    leaves = [k for k in _ARGS if ins[k] is not None]
    grads = torch.autograd.grad(
        (out, last), [ins[k] for k in leaves], (dout.double(), dlast.double())
    )
    return out, last, dict(zip(leaves, grads))


def _poison(ts):
    for t in ts:
        if t.is_floating_point():
            t.fill_(float("nan"))


def _run_launchers(kw, dout, dlast, policy=DEFAULT, facts=None, fwd_plan=None, bwd_plan=None,
                   options=DEFAULT_LAUNCH):  # fmt: skip
    """Forward and backward through the launchers, each by its plan (the planner's for
    ``policy`` and ``facts`` unless given), launched as ``options`` says: (outputs, {input name:
    gradient})."""
    from ssmscan.ops.selective_scan import triton_bwd, triton_fwd

    args = [kw[k] for k in _ARGS]
    u, delta, A, B, C, D, z, bias, init = args
    outs = empty_forward_outputs(u, A)
    _poison(outs)
    if fwd_plan is None and u.dtype != torch.float64:
        fwd_plan = triton_fwd.plan_for(u, A, B, C, policy, facts)
    sp = kw["delta_softplus"]
    triton_fwd.launch(u, delta, A, B, C, D, z, bias, init, sp, *outs, plan=fwd_plan,
                      options=options)  # fmt: skip
    grads = empty_backward_outputs(u, delta, A, B, C, D, z, bias, init)
    _poison([*grads[:5], *grads[5]])
    if bwd_plan is None and u.dtype != torch.float64 and u.shape[0] * u.shape[2] > 0:
        bwd_plan = triton_bwd.plan_for(u, A, B, args, policy, facts)
    triton_bwd.launch(
        dout, dlast, u, delta, A, B, C, D, z, bias, init, outs[2], sp, *grads[:5], grads[5],
        plan=bwd_plan, options=options,
    )  # fmt: skip
    names = ["u", "delta", "A", "B", "C"] + [
        k for k in ("D", "z", "delta_bias", "initial_state") if kw[k] is not None
    ]
    return outs, dict(zip(names, [*grads[:5], *grads[5]]))


def _reference_checkpoints(kw, L):
    """float64 checkpoint entries: the state before every chunk, then the final state."""
    from ssmscan.ops.selective_scan.shapes import num_checkpoints

    ins = {k: (kw[k].detach().double() if kw[k] is not None else None) for k in _ARGS}
    entries = []
    for c in range(num_checkpoints(L) - 1):
        t = c * CHECKPOINT_LEN
        if t == 0:
            init = ins["initial_state"]
            entries.append(
                init
                if init is not None
                else torch.zeros(
                    ins["u"].shape[0], ins["u"].shape[1], ins["A"].shape[1], dtype=torch.float64
                )
            )
            continue
        pre = {
            k: (ins[k][..., :t] if ins[k] is not None else None)
            for k in ("u", "delta", "B", "C", "z")
        }
        _, last = selective_scan_reference(
            pre["u"],
            pre["delta"],
            ins["A"],
            pre["B"],
            pre["C"],
            ins["D"],
            pre["z"],
            ins["delta_bias"],
            kw["delta_softplus"],
            True,
            ins["initial_state"],
        )
        entries.append(last)
    return entries


def _check(kw, dout, dlast, outs, grads, dtype):
    out, last, ckpt = outs
    r_out, r_last, r_grads = _reference(kw, dout, dlast)
    assert out.dtype == kw["u"].dtype and out.is_contiguous()
    assert_close_to_reference("out", out, r_out, dtype)
    assert_close_to_reference("last_state", last, r_last, dtype)
    # every checkpoint entry: the state before each chunk (entry 0 exactly the initial state or
    # zeros), the last entry the final state, bit-equal to last_state
    L = kw["u"].shape[-1]
    entries = _reference_checkpoints(kw, L)
    assert ckpt.shape[2] == len(entries) + 1
    torch.testing.assert_close(ckpt[:, :, 0].cpu(), entries[0].to(ckpt.dtype).cpu(), rtol=0, atol=0)
    for c, ref in enumerate(entries):
        assert_close_to_reference(f"checkpoint[{c}]", ckpt[:, :, c], ref, dtype)
    torch.testing.assert_close(ckpt[:, :, -1], last, rtol=0, atol=0)
    for k, g in grads.items():
        assert g.dtype == kw[k].dtype and g.shape == kw[k].shape, k
        assert_close_to_reference(f"d{k}", g, r_grads[k], dtype)


_INTERP = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)",
)
_DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp64": torch.float64,
}


ONE_SEGMENT = Policy(split_below_warps=0)


@pytest.fixture(params=["segments", "one-segment"])
def segmenting(request):
    """The policy: L split into segments (the planner's choice at these tiny sizes: few
    channels) or never (the plain single-segment walk)."""
    return DEFAULT if request.param == "segments" else ONE_SEGMENT


def _launches(monkeypatch):
    """Record (kernel name, grid, keyword arguments) of every launch through ``launcher``, then
    run it as it would."""
    seen: list[tuple[str, tuple, dict]] = []
    real = triton_launch._Launcher._launch

    def spy(self, grid, *args, **kw):
        seen.append((self._jit.fn.__name__, tuple(grid), kw))
        return real(self, grid, *args, **kw)

    monkeypatch.setattr(triton_launch._Launcher, "_launch", spy)
    return seen


def _names(seen):
    return [name for name, _, _ in seen]


def _short_chunks(monkeypatch):
    """16-step checkpoint chunks (more segments and chunks at interpreter-sized lengths)."""
    from ssmscan.ops.selective_scan import shapes

    for mod in (shapes, sys.modules[__name__]):
        monkeypatch.setattr(mod, "CHECKPOINT_LEN", 16)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("batch,dim,L,N,groups,full,softplus,init", CASES)
def test_triton_interpreter(batch, dim, L, N, groups, full, softplus, init, segmenting):
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, full, softplus, init, torch.float32, "cpu")
    outs, grads = _run_launchers(kw, dout, dlast, segmenting)
    _check(kw, dout, dlast, outs, grads, torch.float32)


# (batch, dim, L, N, groups, full, softplus, init, dtype, dlast given)
_L517_N16 = (1, 3, 517, 16, None, True, True, True, "fp32", False)
DTYPE_CASES = [
    pytest.param(
        1, 4, 37, 4, None, True, True, False, "bf16", False, id="B1-D4-L37-N4-bf16-nodlast"
    ),
    pytest.param(2, 4, 63, 16, 2, True, True, True, "fp16", True, id="B2-D4-L63-N16-G2-fp16-init"),
    pytest.param(
        1, 3, 517, 4, None, True, True, True, "fp16", False, id="B1-D3-L517-N4-fp16-nodlast"
    ),
    pytest.param(
        1, 2, 257, 16, None, True, True, True, "bf16", True, id="B1-D2-L257-N16-bf16-init"
    ),
    pytest.param(*_L517_N16, id="B1-D3-L517-N16-nodlast", marks=pytest.mark.slow),
    pytest.param(2, 2, 7, 1, None, False, False, False, "fp16", True, id="B2-D2-L7-N1-fp16-bare"),
    pytest.param(1, 3, 300, 4, None, True, True, True, "fp64", True, id="B1-D3-L300-N4-fp64-host"),
]


def _run_case(batch, dim, L, N, groups, full, softplus, init, dtype, dlast_given, **plans):
    _run_case_dev(batch, dim, L, N, groups, full, softplus, init, dtype, dlast_given, "cpu",
                  **plans)  # fmt: skip


def _run_case_dev(batch, dim, L, N, groups, full, softplus, init, dtype, dlast_given, device,
                  **plans):  # fmt: skip
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, full, softplus, init, dtype, device, seed=L)
    outs, grads = _run_launchers(kw, dout, dlast if dlast_given else None, **plans)
    _check(kw, dout, dlast if dlast_given else torch.zeros_like(outs[1]), outs, grads, dtype)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("batch,dim,L,N,groups,full,softplus,init,dt,dlast_given", DTYPE_CASES)
def test_triton_interpreter_dtypes(batch, dim, L, N, groups, full, softplus, init, dt, dlast_given):
    _run_case(batch, dim, L, N, groups, full, softplus, init, _DTYPES[dt], dlast_given)


@pytest.mark.triton
@pytest.mark.slow
@_INTERP
@pytest.mark.parametrize("dt", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("N", [1, 16])
@pytest.mark.parametrize("L", [63, 301])
def test_triton_interpreter_grid(L, N, dt):
    """A grid over dtype x N at one short and one multi-chunk length: grouped B / C, every
    optional input, dlast given for odd L."""
    _run_case(2, 4, L, N, 2 if N != 1 else None, True, True, L % 2 == 1, _DTYPES[dt], L % 2 == 1)


# the split path of the backward (Note [selective scan backward split]): N 9..16, channels per
# group a multiple of 8; (batch, dim, L, N, groups, full, softplus, init, dtype, dlast given)
SPLIT_CASES = [
    pytest.param(
        1, 16, 300, 16, None, True, True, True, "fp32", True, id="B1-D16-L300-N16-init-dlast"
    ),
    pytest.param(1, 16, 63, 12, 2, True, False, True, "fp32", False, id="B1-D16-L63-N12-G2-nosp"),
    pytest.param(1, 8, 517, 16, None, False, True, False, "bf16", True, id="B1-D8-L517-bf16-bare"),
]


def _split_plan(kw, main, policy):
    """The backward plan of these inputs with the lane main kernel ("lane") or its fallback, the
    split kernel ("split")."""
    from ssmscan.ops.selective_scan import triton_bwd

    args = [kw[k] for k in _ARGS]
    plan = triton_bwd.plan_for(args[0], args[2], args[3], args, policy)
    assert plan.main == "lane" and plan.fallback is not None and plan.fallback.main == "split"
    return plan if main == "lane" else plan.fallback


@pytest.mark.triton
@_INTERP
@pytest.mark.slow
@pytest.mark.parametrize("main", ["lane", "split"])
@pytest.mark.parametrize("batch,dim,L,N,groups,full,softplus,init,dt,dlast_given", SPLIT_CASES)
def test_triton_interpreter_split_backward(
    batch, dim, L, N, groups, full, softplus, init, dt, dlast_given, main, segmenting, monkeypatch
):
    """The lane and the split main kernels, L in segments and not. Under the interpreter the
    reduce-scatters' shuffles are emulated (``EMU``): this checks the kernels' indexing and every
    feature, not the GPU shuffles (test_triton_layouts.py checks the layouts they rely on)."""
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, full, softplus, init, _DTYPES[dt], "cpu",
                              seed=L)  # fmt: skip
    seen = _launches(monkeypatch)
    plan = _split_plan(kw, main, segmenting)
    outs, grads = _run_launchers(kw, dout, dlast if dlast_given else None, segmenting,
                                 bwd_plan=plan)  # fmt: skip
    _check(kw, dout, dlast if dlast_given else torch.zeros_like(outs[1]), outs, grads,
           _DTYPES[dt])  # fmt: skip
    main_kernel = {"lane": "_selective_scan_bwd_lane_kernel",
                   "split": "_selective_scan_bwd_split_kernel"}[main]  # fmt: skip
    assert main_kernel in _names(seen)
    # segments on the lane path: the local pass in the lane states kernel, not the 2-D one
    local = "_selective_scan_bwd_local_kernel" in _names(seen)
    assert local == (main == "split" and plan.nseg > 1)


@pytest.mark.triton
@_INTERP
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fold", "carry-kernel", "fold-3-chunk-segments"])
def test_triton_interpreter_many_segments(mode, monkeypatch):
    """Nine 16-step checkpoint chunks (L = 141: eight whole and a partial one), batch 2, in nine
    segments (or three of three chunks): the forward's local pass runs for all but the last
    segment (in ``local_fine`` times as many, shorter ones) and each real-pass segment folds
    those before it. The backward's local pass runs in the lane states kernel, one program per
    segment; its main kernel folds the segments to its right (``CARRY``) or, beyond
    ``fold_max_segments``, reads the carry kernel's. Outputs, last state and every gradient match
    float64, dlast given (the backward's carry starts from it)."""
    _short_chunks(monkeypatch)
    policy = Policy(fold_max_segments=8 if mode == "carry-kernel" else 9)
    facts = INTERPRETED
    if mode == "fold-3-chunk-segments":  # 4 warps against a target of 12: 3 segments
        facts = DeviceFacts(1, 65536, (0, 0), False)
        policy = Policy(fwd_warps_per_sm=12)
    nseg = 3 if mode == "fold-3-chunk-segments" else 9
    seen = _launches(monkeypatch)
    _run_case(2, 16, 141, 16, None, True, True, True, torch.float32, True, policy=policy,
              facts=facts)  # fmt: skip
    grids: dict[str, list] = {}
    for name, grid, _ in seen:
        grids.setdefault(name, []).append(grid)
    assert ("_selective_scan_bwd_carry_kernel" in grids) == (mode == "carry-kernel")
    assert [g[2] for g in grids["_selective_scan_bwd_lane_states_kernel"]] == [nseg]
    assert [g[2] for g in grids["_selective_scan_bwd_lane_kernel"]] == [nseg]
    # the forward's local pass (one channel a thread), then its real pass (two)
    fold = 2 if (18 // nseg) % 2 == 0 else 1  # 18 tiles of 8 steps, segments of 2 or 6
    assert [g[2] for g in grids["_selective_scan_fwd_lane_kernel"]] == [(nseg - 1) * fold]
    assert [g[2] for g in grids["_selective_scan_fwd_lane2_kernel"]] == [nseg]


def _failing(monkeypatch, failing: str) -> list[str]:
    """Launches recorded by kernel name in the returned list, ``failing``'s raising
    ``LaneLayoutError`` as its layout check would (before the launch)."""
    from ssmscan.ops.selective_scan.layout_check import LaneLayoutError

    launched: list[str] = []
    real = triton_launch._Launcher._launch

    def spy(self, grid, *args, **kw):
        launched.append(self._jit.fn.__name__)
        if launched[-1] == failing:
            raise LaneLayoutError("laid out differently")
        return real(self, grid, *args, **kw)

    monkeypatch.setattr(triton_launch._Launcher, "_launch", spy)
    return launched


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "failing,fallback",
    [
        ("_selective_scan_bwd_lane_kernel", "_selective_scan_bwd_split_kernel"),
        ("_selective_scan_bwd_lane_states_kernel", "_selective_scan_bwd_states_kernel"),
        ("_selective_scan_fwd_lane2_kernel", "_selective_scan_fwd_kernel"),
    ],
    ids=["lane-main", "lane-states", "lane-forward"],
)
def test_triton_interpreter_layout_fallback_per_call(failing, fallback, monkeypatch):
    """A lane kernel failing its layout check (raised before its launch): this call runs its
    plan's fallback, with a warning, and every output and gradient matches float64; the next
    call tries the lane kernel again (the fallback belongs to the plan, not to the process).
    Two segments (16-step chunks): the fallbacks' carry passes run too."""
    _short_chunks(monkeypatch)
    launched = _failing(monkeypatch, failing)
    for _ in range(2):
        launched.clear()
        with pytest.warns(UserWarning, match="this call runs"):
            _run_case(1, 8, 40, 16, None, True, True, True, torch.float32, True)
        assert failing in launched and fallback in launched, launched
        assert launched.index(failing) < launched.index(fallback), launched


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "batch,dim,L,N,groups", [(2, 8, 40, 16, None), (1, 16, 41, 12, 2)], ids=["G1-N16", "G2-N12"]
)
def test_triton_interpreter_finish_kernel(batch, dim, L, N, groups, monkeypatch):
    """dB / dC summed over the blocks and transposed by one Triton kernel (groups: each sums its
    own blocks; N < NP: the padded states are not written)."""
    seen = _launches(monkeypatch)
    _run_case(batch, dim, L, N, groups, True, True, False, torch.float32, True)
    assert "_selective_scan_bwd_sum_partials_kernel" in _names(seen)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("warps,groups", [(1, 2), (4, None)], ids=["1warp-G2", "4warps"])
@pytest.mark.slow
def test_triton_interpreter_small_lane_programs(warps, groups):
    """Forward programs of other than 2 warps (``Policy.fwd_warps``): the lane forward, states
    and local passes on 8-channel 1-warp programs (two groups) and 32-channel 4-warp programs
    still match float64, L in segments."""
    from ssmscan.ops.selective_scan.plan import fwd_block_channels

    policy = Policy(fwd_warps=warps)
    assert fwd_block_channels(32, groups or 1, 16, 4, policy) == {1: (8, 1), 4: (32, 4)}[warps]
    _run_case(1, 32, 300, 16, groups, True, True, True, torch.float32, True, policy=policy)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("N", [16, 2])
def test_triton_interpreter_backward_without_steps(N):
    """L = 0: the backward launches nothing (the lane kernels assume steps) and gives the exact
    gradients: dA / dD / ddelta_bias zero (empty sums), dinitial_state = dlast (the state is
    never updated), the rest empty; batch = 0 matches the reference."""
    kw, dout, dlast = _inputs(2, 16, 0, N, None, True, True, True, torch.float32, "cpu", seed=1)
    outs, grads = _run_launchers(kw, dout, dlast)
    torch.testing.assert_close(outs[1], kw["initial_state"].float(), rtol=0, atol=0)
    for name in ("A", "D", "delta_bias"):
        assert torch.equal(grads[name], torch.zeros_like(grads[name])), name
    torch.testing.assert_close(grads["initial_state"], dlast, rtol=0, atol=0)
    for name in ("u", "delta", "B", "C", "z"):
        assert grads[name].numel() == 0, name
    _run_case(0, 16, 40, N, None, True, True, True, torch.float32, True)


@pytest.mark.triton
@_INTERP
def test_triton_off_split_backward_runs_tile_rs(monkeypatch):
    """N = 4 (NP 4) and L off a multiple of 16 are not the split kernels': the 2-D backward with
    the one-warp reduce-scatter of dB / dC (``tile_rs``, 32-channel blocks; its shuffles
    emulated here, RS 2); 12 channels per group (G = 2) do not fill its warp: plain ``tile``."""
    seen = _launches(monkeypatch)
    _run_case(1, 5, 40, 4, None, True, True, False, torch.float32, True)
    _run_case(1, 24, 40, 16, 2, True, True, False, torch.float32, False)
    tile = [kw for name, _, kw in seen if name == "_selective_scan_bwd_tile_kernel"]
    assert [(kw["RS"], kw["BLOCK_D"], kw["num_warps"]) for kw in tile] == [
        (2, 32, 1),
        (False, 4, 1),
    ]


@pytest.mark.triton
@_INTERP
def test_triton_rejects_unsupported_dtype():
    from ssmscan.ops.selective_scan import triton_fwd

    kw = make_selective_scan_inputs(1, 2, 5, 4, dtype=torch.float32)
    u = kw["u"].to(torch.int32)
    with pytest.raises(TypeError, match="float32"):
        triton_fwd.launch(
            u, kw["delta"], kw["A"], kw["B"], kw["C"], None, None, None, None, True,
            *empty_forward_outputs(kw["u"], kw["A"]),
        )  # fmt: skip


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
def test_lane_backward_prefetches_only_in_eager(traced, monkeypatch):
    """Note [traced kernels' inline asm]: the lane main kernel's L1 prefetch (a non-pure inline
    asm, which stops torch's mutation analysis of a traced launch) is planned only when the
    launch is not traced (``wrap_triton`` off); everything else about the launch is the same."""
    from torch._library.triton import set_wrap_triton_enabled

    from ssmscan.ops.selective_scan import shapes, triton_bwd

    seen: dict[str, dict] = {}

    def fake(self, grid, *args, **kw):  # records the launch, runs nothing
        seen.setdefault(self._jit.fn.__name__, kw)

    monkeypatch.setattr(triton_launch._Launcher, "_launch", fake)
    kw, dout, _ = _inputs(1, 16, 64, 16, None, True, True, False, torch.float32, "cpu")
    ckpt = torch.zeros(1, 16, shapes.num_checkpoints(64), 16)
    args = [kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
    with set_wrap_triton_enabled(traced):
        triton_bwd.backward(dout, None, *args, None, ckpt, True)
    consts = seen["_selective_scan_bwd_lane_kernel"]
    assert consts["PREFETCH_BC"] is (not traced)
    assert consts["PREFETCH"] is True


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("two", [True, False], ids=["two-channels", "one-channel"])
@pytest.mark.parametrize(
    "dim,L,target",
    [pytest.param(32, 141, 12, marks=pytest.mark.slow), (32, 141, 8),
     pytest.param(64, 45, 0, marks=pytest.mark.slow), (48, 77, 12)],
    ids=["3-segments", "2-segments", "unsplit", "48-channels"],
)  # fmt: skip
def test_triton_interpreter_forward_real_pass(dim, L, target, two, monkeypatch):
    """The lane forward's real pass with two channels a thread (``Policy.two_channels``, Note
    [selective scan forward two channels a thread]) or one, in segments of tiles (3 of 6 tiles
    with local segments of 3, boundaries inside 16-step checkpoint chunks; 2 of 9 tiles) or in
    one (``target`` 0), the last program's second half past ``dim`` (48 channels: 32 a program).
    Outputs, checkpoints, last state and gradients against float64, and that the kernel ran."""
    _short_chunks(monkeypatch)
    seen = _launches(monkeypatch)
    facts = DeviceFacts(1, 65536, (0, 0), False)
    policy = Policy(two_channels=two, fwd_warps_per_sm=target or 64,
                    split_below_warps=512 if target else 0)  # fmt: skip
    _run_case(1, dim, L, 16, None, True, True, True, torch.float32, True, policy=policy,
              facts=facts)  # fmt: skip
    assert ("_selective_scan_fwd_lane2_kernel" in _names(seen)) == two


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "dt,two,dim", [("bf16", True, 48), ("fp16", False, 3)], ids=["bf16-two-channels", "fp16-one-channel"]
)  # fmt: skip
def test_triton_interpreter_forward_rows16(dt, two, dim, monkeypatch):
    """16-bit B / C rows (``Policy.rows16`` "always"; Note [selective scan forward 16-bit rows]):
    copied in the inputs' bf16 (pairs in int32 words) or fp16, in both passes, in segments of
    tiles. Outputs, checkpoints, last state and gradients against float64, and that the rows
    reached the kernels in 16 bits."""
    _short_chunks(monkeypatch)
    seen = _launches(monkeypatch)
    policy = Policy(rows16="always", two_channels=two)
    _run_case(1, dim, 77, 16, None, True, True, True, _DTYPES[dt], True, policy=policy)
    fwd = [(n, kw) for n, _, kw in seen if n.startswith("_selective_scan_fwd_lane")]
    assert fwd and all(kw["BC16"] == (1 if dt == "bf16" else 2) for _, kw in fwd)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "batch,dim,L,two,even",
    [(2, 32, 48, True, True), (1, 48, 64, True, False), (1, 32, 48, False, True),
     (1, 32, 45, True, False)],
    ids=["two-channels", "two-channels-partial-program", "one-channel", "partial-tile"],
)  # fmt: skip
def test_triton_interpreter_forward_even(batch, dim, L, two, even, monkeypatch):
    """The lane forward's loop without masks (``EVEN``, 32-bit offsets ``I32``, u / delta / z two
    tiles ahead) where every tile is whole and every program's channels exist, unsplit; masked
    where a tile is partial or (two channels a thread) a program's second half is past ``dim``."""
    seen = _launches(monkeypatch)
    policy = Policy(two_channels=two, split_below_warps=0)
    _run_case(batch, dim, L, 16, None, True, True, True, torch.float32, True, policy=policy)
    real = [kw for n, _, kw in seen if n.startswith("_selective_scan_fwd_lane")][-1]
    assert real.get("EVEN", False) == even
    assert real.get("I32", False) == even


GPU_CASES = [
    pytest.param(2, 64, 63, 16, None, id="B2-D64-L63-N16"),
    pytest.param(1, 64, 517, 16, 2, id="B1-D64-L517-N16-G2"),
    pytest.param(4, 2048, 600, 16, None, id="B4-D2048-L600-N16"),
    pytest.param(1, 96, 1000, 16, 3, id="B1-D96-L1000-N16-G3"),
    pytest.param(2, 130, 1, 4, None, id="B2-D130-L1-N4"),
    pytest.param(1, 512, 3001, 8, None, id="B1-D512-L3001-N8"),
    pytest.param(1, 64, 333, 32, None, id="B1-D64-L333-N32"),
    pytest.param(1, 32, 200, 40, None, id="B1-D32-L200-N40-2d-forward"),
]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"]
)
@pytest.mark.parametrize("batch,dim,L,N,groups", GPU_CASES)
def test_triton_gpu(batch, dim, L, N, groups, dtype, segmenting):
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast, segmenting)
    _check(kw, dout, dlast, outs, grads, dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("two", [True, False], ids=["two-channels", "one-channel"])
@pytest.mark.parametrize("rows16", ["where_fit", "always"])
@pytest.mark.parametrize(
    "batch,dim,L,N,groups",
    [(1, 64, 517, 16, 2), (2, 64, 63, 16, None), (4, 2048, 512, 16, None)],
    ids=["B1-D64-L517-G2", "B2-D64-L63", "B4-D2048-L512-even"],
)
def test_triton_gpu_forward_policies(batch, dim, L, N, groups, dtype, two, rows16):
    """The forward's real passes (one or two channels a thread) and B / C row widths on the
    GPU, as the planner picks segments: outputs, checkpoints and gradients against float64."""
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    policy = Policy(two_channels=two, rows16=rows16)
    outs, grads = _run_launchers(kw, dout, dlast, policy)
    _check(kw, dout, dlast, outs, grads, dtype)


# the split path on the GPU: L a multiple of 16, one partial last chunk (784 = 3 x 256 + 16),
# groups, N 12 padded to 16; L = 600 is off it (tile_rs)
SPLIT_GPU_CASES = [
    pytest.param(2, 64, 512, 16, None, id="B2-D64-L512-N16"),
    pytest.param(1, 64, 784, 16, 2, id="B1-D64-L784-N16-G2"),
    pytest.param(4, 2048, 768, 16, None, id="B4-D2048-L768-N16"),
    pytest.param(1, 96, 2048, 12, 3, id="B1-D96-L2048-N12-G3"),
    pytest.param(1, 64, 600, 16, None, id="B1-D64-L600-N16-tile-rs"),
]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"]
)
@pytest.mark.parametrize("main", ["lane", "split"])
@pytest.mark.parametrize("batch,dim,L,N,groups", SPLIT_GPU_CASES)
def test_triton_gpu_split_backward(batch, dim, L, N, groups, dtype, main, segmenting):
    """The lane and split main kernels (and, off the split path, ``tile_rs``) on the GPU."""
    from ssmscan.ops.selective_scan import triton_bwd

    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    args = [kw[k] for k in _ARGS]
    plan = triton_bwd.plan_for(args[0], args[2], args[3], args, segmenting)
    if L % 16:
        assert plan.main == "tile_rs" and plan.block_d == 32 and plan.warps == 1
    elif main == "split":
        plan = plan.fallback
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no layout-check fallback
        outs, grads = _run_launchers(kw, dout, dlast, segmenting, bwd_plan=plan)
    _check(kw, dout, dlast, outs, grads, dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "batch,dim,L,N,groups",
    [(2, 64, 512, 16, None), (1, 96, 2048, 12, 3), (4, 2048, 768, 16, None), (2, 64, 600, 16, None)],
    ids=["B2-D64-L512", "B1-D96-L2048-N12-G3", "B4-D2048-L768", "B2-D64-L600-tile-rs"],
)  # fmt: skip
def test_triton_gpu_deterministic(batch, dim, L, N, groups, dtype):
    """The partials' sums are in fixed order, so two runs agree bit for bit (and under
    ``torch.use_deterministic_algorithms(True)``)."""
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        again = _run_launchers(kw, dout, dlast)
    finally:
        torch.use_deterministic_algorithms(was)
    for a, b in zip([*outs, *grads.values()], [*again[0], *again[1].values()]):
        assert torch.equal(a, b)
    _check(kw, dout, dlast, outs, grads, dtype)


def _offset(t, k):
    """t's values in a contiguous tensor whose data starts k elements into its storage (so it is
    not 16-byte aligned for k * element size % 16 != 0)."""
    if t is None:
        return None
    flat = torch.empty(t.numel() + k, dtype=t.dtype, device=t.device)
    out = flat[k:].view(t.shape)
    out.copy_(t)
    return out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_triton_gpu_launch_cache_alignment(dtype):
    """Note [eager launch cache]: the same shapes aligned, then misaligned by one element, then
    aligned again: each call must run a kernel specialized for its own pointers (a cached
    kernel compiled for aligned pointers would fault or read wrong data on the misaligned ones);
    results equal the uncached launch's bit for bit."""
    kw, dout, dlast = _inputs(2, 64, 512, 16, None, True, True, True, dtype, "cuda", seed=5)
    runs = []
    for k, fast in ((0, True), (1, True), (0, True), (1, False)):
        moved = {n: _offset(v, k) if isinstance(v, torch.Tensor) else v for n, v in kw.items()}
        outs, grads = _run_launchers(
            moved, _offset(dout, k), _offset(dlast, k), options=LaunchOptions(cache=fast)
        )
        runs.append([*outs, *grads.values()])
        if k == 1:
            assert moved["u"].data_ptr() % 16 != 0
        _check(kw, dout, dlast, outs, grads, dtype)  # the same values, wherever they lie
    for a, b in (*zip(runs[0], runs[2]), *zip(runs[1], runs[3])):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_triton_gpu_float64_routed_to_host_kernel():
    _run_case_dev(1, 8, 300, 16, None, True, True, True, torch.float64, True, "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "dynamic,L",
    [(False, 200), (True, 200), (False, 512)],
    ids=["static", "dynamic", "static-lane-backward"],
)
def test_compile_fullgraph_training_step_gpu(dynamic, L):
    """A compiled training step against eager. L = 200 takes the tile backward; L = 512 (a
    multiple of 16) the lane kernels, whose Inductor-compiled sources once failed to parse (Note
    [kernel sources under Inductor])."""
    import ssmscan  # noqa: F401  (registers the ops)

    kw = make_selective_scan_inputs(2, 64, L, 16, dtype=torch.float32, device="cuda")
    params = {k: kw[k].clone().requires_grad_() for k in ("A", "D", "delta_bias")}

    def loss_fn(u, delta, B, C, z, A, D, delta_bias):
        out, last, _ = torch.ops.ssmscan.selective_scan_fwd(
            u, delta, A, B, C, D, z, delta_bias, None, True
        )
        return out.float().square().mean() + last.square().mean()

    def step(fn, *args):
        loss = fn(*args)
        loss.backward()
        return loss.detach()

    args = [
        kw["u"],
        kw["delta"],
        kw["B"],
        kw["C"],
        kw["z"],
        params["A"],
        params["D"],
        params["delta_bias"],
    ]
    eager = step(loss_fn, *args)
    eager_grads = [params[k].grad.clone() for k in ("A", "D", "delta_bias")]
    for p in params.values():
        p.grad = None
    with warnings.catch_warnings():  # Note [traced layout checks]: each checked, none skipped
        warnings.filterwarnings("error", message="ssmscan: could not compile")
        got = step(torch.compile(loss_fn, fullgraph=True, dynamic=dynamic), *args)
    assert triton_launch._TRACE_CHECKED, "no traced launch was checked"
    assert not any(triton_launch._TRACE_CHECKED.values()), triton_launch._TRACE_CHECKED
    torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-6)
    for k, ref in zip(("A", "D", "delta_bias"), eager_grads):
        torch.testing.assert_close(params[k].grad, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_compile_reduce_overhead_training_step_gpu():
    """``torch.compile(mode="reduce-overhead")`` of a training step on leaf inputs (it failed on
    torch's mutation analysis before Note [traced kernels' inline asm]):
    the public API's forward and backward run as CUDA graphs
    (no graph skipped), L in segments (batch 1, 64 channels, L = 300), and the third step's
    outputs and gradients (a replay) equal eager's."""
    from torch._dynamo.utils import counters

    import ssmscan

    kw = make_selective_scan_inputs(1, 64, 300, 16, dtype=torch.float32, device="cuda")
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
    leaves = [kw[k].clone().requires_grad_() for k in names]
    dout = torch.randn_like(kw["u"])

    def fwd(u, delta, A, B, C, D, z, delta_bias):
        return ssmscan.selective_scan(u, delta, A, B, C, D, z, delta_bias, True, True)

    def step(fn):
        out, last = fn(*leaves)
        grads = torch.autograd.grad((out, last), leaves, (dout, torch.ones_like(last)))
        return [t.detach().clone() for t in (out, last, *grads)]

    ref = step(fwd)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fwd, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # warm-up, recording, replay
        torch.compiler.cudagraph_mark_step_begin()
        got = step(compiled)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    for name, g, r in zip(("out", "last", *names), got, ref):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6, msg=name)
