"""Triton selective-scan kernels against the float64 reference: forward, last state, checkpoints
and every gradient.

``triton`` tests call the launchers directly on CPU tensors under TRITON_INTERPRET=1 (see the
conftest), with outputs from ``shapes.empty_*_outputs`` NaN-poisoned; ``gpu`` tests run the public
op on CUDA, including torch.compile(fullgraph=True).
"""

from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch

from ssmscan.ops.common import triton_launch
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


def _run_launchers(kw, dout, dlast):
    from ssmscan.ops.selective_scan import triton_bwd, triton_fwd

    args = [kw[k] for k in _ARGS]
    u, delta, A, B, C, D, z, bias, init = args
    outs = empty_forward_outputs(u, A)
    _poison(outs)
    triton_fwd.launch(u, delta, A, B, C, D, z, bias, init, kw["delta_softplus"], *outs)
    grads = empty_backward_outputs(u, delta, A, B, C, D, z, bias, init)
    _poison([*grads[:5], *grads[5]])
    triton_bwd.launch(
        dout,
        dlast,
        u,
        delta,
        A,
        B,
        C,
        D,
        z,
        bias,
        init,
        outs[2],
        kw["delta_softplus"],
        *grads[:5],
        grads[5],
    )
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


@pytest.fixture(params=["segments", "one-segment"])
def segmenting(request, monkeypatch):
    """Run with L split into segments (the default at these tiny sizes: few channels) and with
    the plain single-segment walk."""
    from ssmscan.ops.selective_scan import triton_common

    if request.param == "one-segment":
        monkeypatch.setattr(triton_common, "TARGET_WARPS", 0)
    return request.param


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("batch,dim,L,N,groups,full,softplus,init", CASES)
def test_triton_interpreter(batch, dim, L, N, groups, full, softplus, init, segmenting):
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, full, softplus, init, torch.float32, "cpu")
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, torch.float32)


# (batch, dim, L, N, groups, full, softplus, init, dtype, dlast given)
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
    pytest.param(1, 3, 517, 16, None, True, True, True, "fp32", False, id="B1-D3-L517-N16-nodlast"),
    pytest.param(2, 2, 7, 1, None, False, False, False, "fp16", True, id="B2-D2-L7-N1-fp16-bare"),
    pytest.param(1, 3, 300, 4, None, True, True, True, "fp64", True, id="B1-D3-L300-N4-fp64-host"),
]


def _tile_segments(monkeypatch, want, ch2):
    """The lane forward with 16-step checkpoint chunks, in ``want`` segments of whole tiles
    (``triton_fwd.LANE_SEGMENTS``; 0: as planned), its real pass with two channels a thread or
    not (``LANE_CH2``)."""
    from ssmscan.ops.selective_scan import shapes, triton_bwd, triton_fwd

    for mod in (shapes, triton_fwd, triton_bwd, sys.modules[__name__]):
        monkeypatch.setattr(mod, "CHECKPOINT_LEN", 16)
    monkeypatch.setattr(triton_fwd, "FWD_VARIANT", "lane")
    monkeypatch.setattr(triton_fwd, "LANE_SEGMENTS", want)
    monkeypatch.setattr(triton_fwd, "LANE_CH2", ch2)


def _record_launches(monkeypatch, module, record):
    """Wrap ``module.launcher`` (``triton_fwd``'s or ``triton_bwd``'s) so that every kernel
    launch through it first calls ``record(kernel name, grid, launch keyword arguments)``, then
    runs as it would."""
    real = module.launcher

    def spy(kernel, *a):
        launched = real(kernel, *a)

        class Grid:
            def __getitem__(self, grid):
                run = launched[grid]

                def call(*args, **kw):
                    record(kernel.__name__, grid, kw)
                    return run(*args, **kw)

                return call

        return Grid()

    monkeypatch.setattr(module, "launcher", spy)


def _run_case(batch, dim, L, N, groups, full, softplus, init, dtype, dlast_given):
    _run_case_dev(batch, dim, L, N, groups, full, softplus, init, dtype, dlast_given, "cpu")


def _run_case_dev(batch, dim, L, N, groups, full, softplus, init, dtype, dlast_given, device):
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, full, softplus, init, dtype, device, seed=L)
    outs, grads = _run_launchers(kw, dout, dlast if dlast_given else None)
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
    optional input, dlast given for odd L. (The interpreter costs up to a minute a case; L in
    {1, 7, 257, 517} and fp64 are covered by test_triton_interpreter_dtypes. The whole 45-case grid
    over L in {1, 7, 63, 257, 517} x N in {1, 4, 16} passed on 2026-11-30 in 8.5 min.)"""
    _run_case(2, 4, L, N, 2 if N != 1 else None, True, True, L % 2 == 1, _DTYPES[dt], L % 2 == 1)


# the "split" backward (Note [selective scan backward split]): N 9..16, channels per group a
# multiple of 8; (batch, dim, L, N, groups, full, softplus, init, dtype, dlast given)
SPLIT_CASES = [
    pytest.param(
        1, 16, 300, 16, None, True, True, True, "fp32", True, id="B1-D16-L300-N16-init-dlast"
    ),
    pytest.param(1, 16, 63, 12, 2, True, False, True, "fp32", False, id="B1-D16-L63-N12-G2-nosp"),
    pytest.param(1, 8, 517, 16, None, False, True, False, "bf16", True, id="B1-D8-L517-bf16-bare"),
]


class _Applies(list):
    """``applies`` results in order; ``variant``: the BWD_VARIANT the fixture set; ``kernels``:
    the names of the backward's kernels launched (the lane states kernel with the segments'
    local pass, ``ADJ``, as ``..._states_kernel+local``)."""

    variant = "split"
    variant_segments = "segments"
    kernels: set[str]


@pytest.fixture(
    params=[
        ("split", "segments"),
        ("split", "one-segment"),
        ("lane", "segments"),
        ("lane", "one-segment"),
    ],
    ids=lambda p: "-".join(p),
)
def split_backward(request, monkeypatch):
    """BWD_VARIANT "split" or "lane" (Note [selective scan backward lanes]: the split kernel's
    path with the lane layout), with L in segments (the default at these sizes) and without;
    yields the list of ``applies`` results, so a test can check that the split path really ran
    (and ``.variant``: after a lane run, still "lane" unless its layout check fell back)."""
    from ssmscan.ops.selective_scan import triton_bwd, triton_bwd_split, triton_common

    variant, segmenting = request.param
    monkeypatch.setattr(triton_bwd, "BWD_VARIANT", variant)
    if segmenting == "one-segment":
        monkeypatch.setattr(triton_common, "TARGET_WARPS", 0)
        monkeypatch.setattr(triton_common, "FWD_TARGET_WARPS", 0)
    seen = _Applies()
    seen.variant = variant
    seen.variant_segments = segmenting
    seen.kernels = set()
    real = triton_bwd_split.applies

    def spy(*a):
        seen.append(real(*a))
        return seen[-1]

    monkeypatch.setattr(triton_bwd_split, "applies", spy)
    _record_launches(
        monkeypatch,
        triton_bwd,
        lambda name, grid, kw: seen.kernels.add(name + ("+local" if kw.get("ADJ") else "")),
    )
    return seen


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("batch,dim,L,N,groups,full,softplus,init,dt,dlast_given", SPLIT_CASES)
@pytest.mark.slow
def test_triton_interpreter_split_backward(
    batch, dim, L, N, groups, full, softplus, init, dt, dlast_given, split_backward
):
    """Under the interpreter the reduce-scatter's shuffles are emulated (``EMU``): this checks
    the kernel's indexing and every feature, not the GPU shuffles (test_triton_layouts.py checks
    the layouts they rely on; the GPU tests the rest)."""
    _run_case(batch, dim, L, N, groups, full, softplus, init, _DTYPES[dt], dlast_given)
    assert split_backward == [True]
    # segments on the split path: the local pass on the lane tiles, never the 2-D one
    assert "_selective_scan_bwd_local_kernel" not in split_backward.kernels


@pytest.mark.triton
@_INTERP
@pytest.mark.slow
def test_triton_interpreter_lane_local_pass(split_backward):
    """L = 300 (a chunk and a partial one) in segments: the local pass (in the lane states
    kernel, ``STATES_ADJ``) and the carry in the (dim, NP) layout run and the gradients match
    float64 (dlast given: the carry starts from it; two groups of B / C; N = 12, padded to 16).
    The carry is the lane main kernel's own (``CARRY``) and the split kernel's carry pass; with L
    kept in one segment neither runs (two chunks there too, so that the split policy, not L,
    decides)."""
    _run_case(1, 16, 300, 12, 2, True, True, True, torch.float32, True)
    assert split_backward == [True]
    segmented = "_selective_scan_bwd_lane_states_kernel+local" in split_backward.kernels
    assert segmented == (split_backward.variant_segments == "segments")
    assert "_selective_scan_bwd_lane_local_kernel" not in split_backward.kernels
    carry_kernel = "_selective_scan_bwd_carry_kernel" in split_backward.kernels
    assert carry_kernel == (segmented and split_backward.variant == "split")


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "mode,chunks",
    [("fold", 1), ("carry-kernel", 1), ("local-kernel", 1), ("fold", 3)],
    ids=["fold", "carry-kernel", "local-kernel", "fold-3-chunk-segments"],
)
@pytest.mark.slow
def test_triton_interpreter_many_segments(mode, chunks, monkeypatch):
    """Nine 16-step checkpoint chunks (L = 141: eight whole and a partial one), batch 2, in nine
    segments (or three of three chunks): the forward's local pass runs for all but the last
    segment (in ``LANE_LOCAL_FINE`` times as many, shorter ones) and each real-pass segment folds
    those before it, several loads at a time (``fold_segments``, ``_fold_pair``: a padded last
    group). The backward's local pass runs in the lane states
    kernel, one program per segment walking its chunks (``STATES_ADJ``; "local-kernel": its own
    kernel, which skips segment 0, and the states kernel one program per chunk); its main kernel
    folds the segments to its right (``CARRY``, no carry kernel) or, beyond
    ``FOLD_MAX_SEGMENTS``, reads the carry kernel's. Outputs, last state and every gradient match
    float64, dlast given (the backward's carry starts from it)."""
    from ssmscan.ops.selective_scan import shapes, triton_bwd, triton_common, triton_fwd

    for mod in (shapes, triton_fwd, triton_bwd, sys.modules[__name__]):  # this one: the check's
        monkeypatch.setattr(mod, "CHECKPOINT_LEN", 16)
    monkeypatch.setattr(triton_bwd, "BWD_VARIANT", "lane")
    monkeypatch.setattr(triton_bwd, "FOLD_MAX_SEGMENTS", 8 if mode == "carry-kernel" else 9)
    monkeypatch.setattr(triton_bwd, "STATES_ADJ", mode != "local-kernel")
    if chunks == 3:  # 4 warps against a target of 12: 3 segments
        monkeypatch.setattr(triton_common, "FWD_TARGET_WARPS", 12)
    nseg = 9 // chunks
    assert triton_common.segments(2 * 2, 9, triton_common.FWD_TARGET_WARPS) == (nseg, chunks)
    grids: dict[str, list] = {}  # kernel name -> the grids of its launches, in order
    for mod in (triton_fwd, triton_bwd):
        real = mod.launcher

        def spy(kernel, *a, real=real):
            launched = real(kernel, *a)

            class Grid:
                def __getitem__(self, grid):
                    grids.setdefault(kernel.__name__, []).append(tuple(grid))
                    return launched[grid]

            return Grid()

        monkeypatch.setattr(mod, "launcher", spy)
    _run_case(2, 16, 141, 16, None, True, True, True, torch.float32, True)
    assert ("_selective_scan_bwd_carry_kernel" in grids) == (mode == "carry-kernel")
    if mode == "local-kernel":
        assert [g[2] for g in grids["_selective_scan_bwd_lane_local_kernel"]] == [8]
        assert [g[2] for g in grids["_selective_scan_bwd_lane_states_kernel"]] == [9]
    else:
        assert "_selective_scan_bwd_lane_local_kernel" not in grids
        assert [g[2] for g in grids["_selective_scan_bwd_lane_states_kernel"]] == [nseg]
    assert [g[2] for g in grids["_selective_scan_bwd_lane_kernel"]] == [nseg]
    # the forward's local pass, then its real pass (two channels a thread: ``LANE_CH2``)
    local = [g[2] for g in grids["_selective_scan_fwd_lane_kernel"]]
    fine = triton_fwd.LANE_LOCAL_FINE
    fold = fine if (18 // nseg) % fine == 0 else 1  # 18 tiles of 8 steps, segments of 2 or 6
    if triton_fwd.LANE_CH2:
        assert local[:1] == [(nseg - 1) * fold]
        assert [g[2] for g in grids["_selective_scan_fwd_lane2_kernel"]][:1] == [nseg]
    else:
        assert local[:2] == [(nseg - 1) * fold, nseg]


def _failing_layout_check(monkeypatch, failing: str) -> list[str]:
    """Nine-segment setup of the fallback tests (16-step checkpoint chunks, the lane backward)
    with ``triton_bwd``'s launches recorded by kernel name in the returned list, and ``failing``'s
    launch raising ``LaneLayoutError`` as its layout check would (before the launch; with the
    ``ADJ`` states kernel it must be the fused one)."""
    from ssmscan.ops.selective_scan import shapes, triton_bwd, triton_fwd
    from ssmscan.ops.selective_scan.triton_fwd_lane import LaneLayoutError

    for mod in (shapes, triton_fwd, triton_bwd, sys.modules[__name__]):
        monkeypatch.setattr(mod, "CHECKPOINT_LEN", 16)
    monkeypatch.setattr(triton_bwd, "BWD_VARIANT", "lane")  # restored after a fallback
    monkeypatch.setattr(triton_fwd, "FWD_VARIANT", "lane")
    launched: list[str] = []
    real = triton_bwd.launcher

    def spy(kernel, *a):
        launched.append(kernel.__name__)
        if kernel.__name__ != failing:
            return real(kernel, *a)

        class Failing:
            def __getitem__(self, grid):
                def launch(*args, **kw):
                    assert kw.get("ADJ", True)
                    raise LaneLayoutError("laid out differently")

                return launch

        return Failing()

    monkeypatch.setattr(triton_bwd, "launcher", spy)
    return launched


@pytest.mark.triton
@_INTERP
@pytest.mark.slow
def test_triton_interpreter_lane_main_fallback_carries(monkeypatch):
    """The lane main kernel failing its layout check (raised before its launch) where it would
    have folded the carry itself: the split kernel runs instead, from the carry kernel's
    adjoints (made then), with a warning; every gradient still matches float64 (nine segments,
    as ``test_triton_interpreter_many_segments``)."""
    launched = _failing_layout_check(monkeypatch, "_selective_scan_bwd_lane_kernel")
    with pytest.warns(UserWarning, match="using the split backward kernel from now on"):
        _run_case(2, 16, 141, 16, None, True, True, True, torch.float32, True)
    i = launched.index("_selective_scan_bwd_lane_kernel")
    assert launched[i + 1 : i + 3] == [
        "_selective_scan_bwd_carry_kernel",
        "_selective_scan_bwd_split_kernel",
    ], launched
    assert "_selective_scan_bwd_carry_kernel" not in launched[:i]


@pytest.mark.triton
@_INTERP
@pytest.mark.slow
def test_triton_interpreter_fused_states_fallback(monkeypatch):
    """The states kernel with the segments' local pass (``STATES_ADJ``) failing its layout check
    (raised before its launch): a warning, the 2-D forward kernels from then on, and this
    backward runs the 2-D local pass and the 2-D states kernel instead (the tile-start states
    are made again, not taken from the failed launch); every gradient matches float64 (nine
    segments, as ``test_triton_interpreter_many_segments``)."""
    from ssmscan.ops.selective_scan import triton_fwd

    launched = _failing_layout_check(monkeypatch, "_selective_scan_bwd_lane_states_kernel")
    with pytest.warns(UserWarning, match="using the 2-D forward kernels from now on"):
        _run_case(2, 16, 141, 16, None, True, True, True, torch.float32, True)
    assert triton_fwd.FWD_VARIANT == "tile"
    i = launched.index("_selective_scan_bwd_lane_states_kernel")
    assert launched[i + 1] == "_selective_scan_bwd_local_kernel", launched
    assert "_selective_scan_bwd_states_kernel" in launched[i:], launched
    assert launched.count("_selective_scan_bwd_lane_states_kernel") == 1, launched


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "batch,dim,L,N,groups", [(2, 8, 40, 16, None), (1, 16, 41, 12, 2)], ids=["G1-N16", "G2-N12"]
)
def test_triton_interpreter_finish_kernel(batch, dim, L, N, groups, monkeypatch):
    """``FINISH_KERNEL``: dB / dC summed over the blocks and transposed by one Triton kernel
    (groups: each sums its own blocks; N < NP: the padded states are not written)."""
    from ssmscan.ops.selective_scan import triton_bwd

    monkeypatch.setattr(triton_bwd, "FINISH_KERNEL", True)
    launched = []
    real = triton_bwd.launcher

    def spy(kernel, *a):
        launched.append(kernel.__name__)
        return real(kernel, *a)

    monkeypatch.setattr(triton_bwd, "launcher", spy)
    _run_case(batch, dim, L, N, groups, True, True, False, torch.float32, True)
    assert "_selective_scan_bwd_sum_partials_kernel" in launched


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("warps,groups", [(1, 2), (4, None)], ids=["1warp-G2", "4warps"])
@pytest.mark.slow
def test_triton_interpreter_small_lane_programs(warps, groups, monkeypatch):
    """``triton_fwd.FWD_WARPS`` other than the default 2: the lane forward, states and local
    kernels on 8-channel 1-warp programs (two groups) and 32-channel 4-warp programs (the
    default before 2026-12-01; no groups, which would cap the block at 16) still match float64,
    L in segments."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "FWD_WARPS", warps)
    G = groups or 1
    assert triton_fwd.fwd_block_channels(1, 32, G, 16, 4) == {1: (8, 1), 4: (32, 4)}[warps]
    _run_case(1, 32, 300, 16, groups, True, True, True, torch.float32, True)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("N", [16, 2])
def test_triton_interpreter_backward_without_steps(N):
    """L = 0: the backward launches nothing (the lane kernels assume steps; with 16 states L = 0
    took their path) and gives the exact gradients: dA / dD / ddelta_bias zero (empty sums),
    dinitial_state = dlast (the state is never updated), the rest empty; batch = 0 matches
    the reference."""
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
def test_triton_split_backward_falls_back(split_backward):
    """N = 4 (NP 4) and 12 channels per group are not the split kernel's: tile_rs runs."""
    _run_case(1, 5, 40, 4, None, True, True, False, torch.float32, True)
    _run_case(1, 24, 40, 16, 2, True, True, False, torch.float32, False)
    assert split_backward == [False, False]


@pytest.mark.triton
@_INTERP
def test_triton_rejects_unsupported_dtype():
    from ssmscan.ops.selective_scan import triton_fwd

    kw = make_selective_scan_inputs(1, 2, 5, 4, dtype=torch.float32)
    u = kw["u"].to(torch.int32)
    with pytest.raises(TypeError, match="float32"):
        triton_fwd.launch(
            u,
            kw["delta"],
            kw["A"],
            kw["B"],
            kw["C"],
            None,
            None,
            None,
            None,
            True,
            *empty_forward_outputs(kw["u"], kw["A"]),
        )


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


# the unrolled lane forward's GPU cases: odd L, groups, a multiple of the tile, N = 8 and 32
_UNROLLED_CASES = ("B1-D64-L517-N16-G2", "B1-D512-L3001-N8", "B1-D64-L333-N32", "B2-D64-L63-N16")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"]
)
@pytest.mark.parametrize("batch,dim,L,N,groups", GPU_CASES)
def test_triton_gpu(batch, dim, L, N, groups, dtype, segmenting):
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("L", [45, 141])
def test_triton_interpreter_forward_unrolled(L, monkeypatch):
    """``triton_fwd.FWD_UNROLL`` = (2, 2): the lane forward's real and local passes two tiles per
    iteration (an odd number of tiles: the unrolled loop's remainder); L = 141 in segments."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "FWD_UNROLL", (2, 2))
    _run_case(1, 3, L, 16, None, True, True, True, torch.float32, True)


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("L", [45, 141])
def test_triton_interpreter_forward_two_tiles_ahead(L, monkeypatch):
    """``triton_fwd.LANE_AHEAD`` = 2: u, delta, z loaded two tiles ahead (the last tiles' loads
    past the segment masked); L = 141 in segments."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_AHEAD", 2)
    _run_case(1, 3, L, 16, None, True, True, True, torch.float32, True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("batch,dim,L,N,groups", [c for c in GPU_CASES if c.id in _UNROLLED_CASES])
def test_triton_gpu_forward_two_tiles_ahead(
    batch, dim, L, N, groups, dtype, segmenting, monkeypatch
):
    """The lane forward with ``triton_fwd.LANE_AHEAD`` = 2 on the GPU: outputs, checkpoints and
    gradients against float64."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_AHEAD", 2)
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)
    assert triton_fwd.FWD_VARIANT == "lane"


# the lane forward's kernel options (``triton_fwd.LANE_OPTIONS``; the L1 prefetches are no-ops
# under the interpreter, which has no inline PTX: the GPU tests run them)
_LANE_OPTION_CASES = [
    pytest.param({"BC_JIT": 1}, id="bc-jit"),
    pytest.param({"DT_DEFER": 1}, id="dt-defer"),
    pytest.param({"BC_JIT": 1, "PF_BC": 2, "PF_ELEM": 64, "PF_EVERY": 1}, id="bc-jit-prefetch"),
    pytest.param({"BC_ROLL": 0}, id="carried-tile"),
    pytest.param({"PF_BC": 2, "DT_DEFER": 1}, id="bc-roll-prefetch"),
    pytest.param({"BC_SMEM": 1}, id="bc-smem"),
]


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("L", [45, 141])
@pytest.mark.parametrize("opts", _LANE_OPTION_CASES)
def test_triton_interpreter_forward_lane_options(L, opts, monkeypatch):
    """The lane forward with B / C loaded in their tile (``BC_JIT``) or the next tile's rows
    carried as a whole (``BC_ROLL`` off; on by default: ``triton_fwd.LANE_BC_ROLL``), the local
    pass's dt sums reduced at its end (``DT_DEFER``) and the prefetch options: L = 141 in
    segments."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_OPTIONS", opts)
    _run_case(1, 3, L, 16, None, True, True, True, torch.float32, True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("batch,dim,L,N,groups", [c for c in GPU_CASES if c.id in _UNROLLED_CASES])
@pytest.mark.parametrize("opts", _LANE_OPTION_CASES)
def test_triton_gpu_forward_lane_options(
    batch, dim, L, N, groups, dtype, opts, segmenting, monkeypatch
):
    """The lane forward's kernel options on the GPU: outputs, checkpoints and gradients against
    float64."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_OPTIONS", opts)
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)
    assert triton_fwd.FWD_VARIANT == "lane"


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("ch2", [0, 1])
@pytest.mark.parametrize("fine,group", [(1, 0), (2, 0), (3, 0), (2, 8), (1, 3)])
@pytest.mark.parametrize("want,nseg", [(5, 5), (7, 6)])
def test_triton_interpreter_forward_segments_of_tiles(want, nseg, fine, group, ch2, monkeypatch):
    """``triton_fwd.LANE_SEGMENTS``: the split lane forward in segments of whole tiles, not
    checkpoint chunks (16 steps here): at L = 141 (18 tiles of 8) 5 segments of 4 tiles or 6 of
    3, so that segment boundaries fall inside chunks (t = 24, 72, ..) and the checkpoints there
    come from the segment holding them. Outputs, checkpoints (through the backward), last state
    and gradients against float64, and the forward's grids; with the one- and the two-channel
    real pass (``LANE_CH2``), and with the local pass in 2 or 3 times as many segments
    (``LANE_LOCAL_FINE``, where that divides a segment's tiles: 4 and 3 here), and the
    two-channel real pass folding 8 or 3 segments at a time for both halves
    (``LANE_FOLD_GROUP``)."""
    from ssmscan.ops.selective_scan import triton_fwd

    _tile_segments(monkeypatch, want, ch2)
    monkeypatch.setattr(triton_fwd, "LANE_LOCAL_FINE", fine)
    monkeypatch.setattr(triton_fwd, "LANE_FOLD_GROUP", group)
    fold = fine if (18 // nseg + (18 % nseg > 0)) % fine == 0 else 1  # tiles a segment: 4, 3
    real_pass = "_selective_scan_fwd_lane2_kernel" if ch2 else "_selective_scan_fwd_lane_kernel"
    grids: list[tuple] = []
    _record_launches(monkeypatch, triton_fwd, lambda name, grid, kw: grids.append((name, *grid)))
    _run_case(1, 3, 141, 16, None, True, True, True, torch.float32, True)
    # the local pass (nseg - 1 segments, fold times as many), then the real pass
    assert [(g[0], g[3]) for g in grids][:2] == [
        ("_selective_scan_fwd_lane_kernel", (nseg - 1) * fold),
        (real_pass, nseg),
    ]


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("ch2", [0, 1])
def test_triton_interpreter_forward_local_options(ch2, monkeypatch):
    """``triton_fwd.LANE_LOCAL_OPTIONS``: constexprs of the split forward's one-channel local
    pass alone (here its B rows loaded in their own tile, ``BC_JIT``), the real pass as ever
    (the two-channel one still taken). Outputs, checkpoints (through the backward), last state
    and gradients against float64, and the options each pass got."""
    from ssmscan.ops.selective_scan import triton_fwd

    _tile_segments(monkeypatch, 5, ch2)
    monkeypatch.setattr(triton_fwd, "LANE_LOCAL_OPTIONS", {"BC_JIT": 1, "BC_ROLL": 0})
    seen: list[tuple] = []
    _record_launches(
        monkeypatch,
        triton_fwd,
        lambda name, grid, kw: seen.append((name, kw.get("LOCAL"), kw.get("BC_JIT", 0))),
    )
    _run_case(1, 40, 141, 16, None, True, True, True, torch.float32, True)
    real_pass = "_selective_scan_fwd_lane2_kernel" if ch2 else "_selective_scan_fwd_lane_kernel"
    assert seen[:2] == [
        ("_selective_scan_fwd_lane_kernel", True, 1),
        (real_pass, None if ch2 else False, 0),
    ]


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "batch,dim,L,want,ch2,mode,even,i32",
    [
        (1, 32, 72, 4, 1, 2, True, True),  # split, segments of whole tiles, two-channel real pass
        (1, 32, 72, 4, 1, 2, True, False),  # ... 64-bit offsets
        (1, 32, 72, 4, 0, 2, True, True),  # ... the one-channel real pass
        (1, 32, 72, 4, 1, 1, False, True),  # the library's mode: not where L is split
        (2, 32, 64, 0, 1, 1, True, True),  # unsplit (want 0: no segments at all)
        (1, 24, 72, 4, 1, 2, False, True),  # channels: 24 is no multiple of a program's
        (1, 32, 69, 4, 1, 2, False, True),  # steps: a partial last tile
    ],
)
def test_triton_interpreter_forward_even(batch, dim, L, want, ch2, mode, even, i32, monkeypatch):
    """``triton_fwd.LANE_EVEN`` / ``LANE_I32`` / ``LANE_EVEN_AHEAD``: where every tile is whole
    (L % 8 == 0) and every program's channels exist, the lane forward's loop runs without masks
    (u, delta, z two tiles ahead, clamped to the segment's last tile), with 32-bit row offsets or
    not; elsewhere, and where L is split in the library's mode, it keeps its masks. Outputs,
    checkpoints (through the backward), last state and gradients against float64, and the
    constexprs every forward launch got."""
    from ssmscan.ops.selective_scan import triton_common, triton_fwd

    _tile_segments(monkeypatch, want, ch2)
    monkeypatch.setattr(triton_fwd, "LANE_I32", i32)
    monkeypatch.setattr(triton_fwd, "LANE_EVEN", mode)
    if not want:
        monkeypatch.setattr(triton_common, "SPLIT_BELOW_WARPS", 0)
    seen: list[tuple] = []

    def record(name, grid, kw):
        if "fwd_lane" in name:
            seen.append((name, kw.get("EVEN", False), kw.get("I32", False), kw.get("AHEAD")))

    _record_launches(monkeypatch, triton_fwd, record)
    _run_case(batch, dim, L, 16, None, True, True, True, torch.float32, True)
    assert seen, seen
    for _, e, i, ahead in seen:
        assert (e, i, ahead) == ((True, i32, 2) if even else (False, False, 1)), seen
    assert len(seen) == (1 if not want else 2)  # (unsplit: the real pass alone)


def _even_load_masks(monkeypatch, ldm, real):
    """The unmasked loop everywhere with load masks ``ldm`` (``triton_fwd.LANE_EVEN_LDM``) and the
    real pass's own (I32, AHEAD, LDM) ``real`` (``LANE_REAL_*``; None: the local pass's); returns
    the list that each lane-forward launch's (LOCAL, EVEN, I32, AHEAD, LDM) is appended to, and
    those expected of a local (True) and a real (False) pass."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_EVEN", 2)
    monkeypatch.setattr(triton_fwd, "LANE_EVEN_LDM", ldm)
    if real is not None:
        for name, v in zip(("LANE_REAL_I32", "LANE_REAL_AHEAD", "LANE_REAL_LDM"), real):
            monkeypatch.setattr(triton_fwd, name, v)
    seen: list[tuple] = []

    def record(name, grid, kw):
        if "fwd_lane" in name:
            seen.append((bool(kw.get("LOCAL")), kw.get("EVEN"), kw.get("I32"), kw.get("AHEAD"),
                         kw.get("LDM")))  # fmt: skip

    _record_launches(monkeypatch, triton_fwd, record)
    r_i32, r_ahead, r_ldm = real if real is not None else (1, 2, ldm)
    want = {True: (True, True, True, 2, ldm), False: (False, True, bool(r_i32), r_ahead, r_ldm)}
    return seen, want


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "batch,L,want,ch2,ldm,real",
    [
        (1, 72, 4, 1, 1, (0, 1, 1)),  # split: the local pass's channel masks, the real pass's own
        (1, 72, 4, 0, 2, None),  # split, one-channel real pass: also the loads' step masks
        (2, 64, 0, 1, 2, (1, 2, 0)),  # unsplit (the real pass alone, its own settings)
    ],
)
def test_triton_interpreter_forward_even_load_masks(batch, L, want, ch2, ldm, real, monkeypatch):
    """The unmasked loop with masks kept on its loads (``triton_fwd.LANE_EVEN_LDM``), and the
    real pass's own ``LANE_REAL_I32`` / ``LANE_REAL_AHEAD`` / ``LANE_REAL_LDM``: outputs,
    checkpoints (through the backward), last state and gradients against float64, and the
    constexprs each pass got."""
    from ssmscan.ops.selective_scan import triton_common

    _tile_segments(monkeypatch, want, ch2)
    if not want:
        monkeypatch.setattr(triton_common, "SPLIT_BELOW_WARPS", 0)
    seen, expected = _even_load_masks(monkeypatch, ldm, real)
    _run_case(batch, 32, L, 16, None, True, True, True, torch.float32, True)
    assert seen == [expected[True]] * bool(want) + [expected[False]], seen


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("ch2", [0, 1])
@pytest.mark.parametrize("want,nseg,lt,group", [(5, 5, 3, 0), (7, 6, 2, 8), (7, 6, 3, 3)])
def test_triton_interpreter_forward_local_tiles(want, nseg, lt, group, ch2, monkeypatch):
    """``triton_fwd.LANE_LOCAL_TILES``: the split lane forward's local pass in segments of its
    own length (the kernels' ``SNAP``), whose boundaries need not fall on the real segments'. At
    L = 141 (18 tiles of 8) the real segments are 4 tiles (5) or 3 (6); local segments of 3 and 2
    tiles hold a real start inside, at their end or none, and the last local one ends at the last
    real start; a local segment as long as a real one is not taken (3 tiles against 3: the plain
    local pass). Outputs, checkpoints (through the backward), last state and gradients
    against float64, and the grids (local segments over the tiles before the last real
    segment)."""
    from ssmscan.ops.selective_scan import triton_fwd

    _tile_segments(monkeypatch, want, ch2)
    monkeypatch.setattr(triton_fwd, "LANE_LOCAL_TILES", lt)
    monkeypatch.setattr(triton_fwd, "LANE_FOLD_GROUP", group)
    seg = 18 // nseg + (18 % nseg > 0)
    real_pass = "_selective_scan_fwd_lane2_kernel" if ch2 else "_selective_scan_fwd_lane_kernel"
    grids: list[tuple] = []
    _record_launches(monkeypatch, triton_fwd, lambda name, grid, kw: grids.append((name, *grid)))
    _run_case(1, 3, 141, 16, None, True, True, True, torch.float32, True)
    nloc = -(-(nseg - 1) * seg // lt) if lt < seg else nseg - 1
    assert [(g[0], g[3]) for g in grids][:2] == [
        ("_selective_scan_fwd_lane_kernel", nloc),
        (real_pass, nseg),
    ]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("want", [3, 22])
@pytest.mark.parametrize("batch,dim,L,N,groups", [c for c in GPU_CASES if c.id in _UNROLLED_CASES])
def test_triton_gpu_forward_segments_of_tiles(batch, dim, L, N, groups, dtype, want, monkeypatch):
    """``triton_fwd.LANE_SEGMENTS`` on the GPU (segment boundaries inside checkpoint chunks):
    outputs, checkpoints and gradients against float64."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_SEGMENTS", want)
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)
    assert triton_fwd.FWD_VARIANT == "lane"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "batch,dim,L,N,groups",
    [(1, 64, 4096, 16, None), (1, 96, 2048, 16, 3), (2, 128, 1024, 16, None), (3, 64, 8, 16, 2)],
)
def test_triton_gpu_forward_even(batch, dim, L, N, groups, dtype, monkeypatch):
    """The lane forward without masks (``triton_fwd.LANE_EVEN``, 32-bit offsets ``LANE_I32``)
    where every tile is whole and every program's channels exist, split or not (mode 2): outputs,
    checkpoints and gradients against float64, and every forward launch took it."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_EVEN", 2)
    seen: list[tuple] = []

    def record(name, grid, kw):
        if "fwd_lane" in name:
            seen.append((name, grid, kw.get("EVEN", False), kw.get("I32", False)))

    _record_launches(monkeypatch, triton_fwd, record)
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)
    assert seen and all(e and i for *_, e, i in seen), seen


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("ldm,real", [(1, None), (2, None), (1, (0, 1, 1)), (2, (0, 2, 0))])
@pytest.mark.parametrize("batch,dim,L,N,groups", [(1, 96, 2048, 16, 3), (2, 128, 1024, 16, None)])
def test_triton_gpu_forward_even_load_masks(batch, dim, L, N, groups, ldm, real, dtype,
                                            monkeypatch):  # fmt: skip
    """The unmasked loop with masks kept on its loads (``triton_fwd.LANE_EVEN_LDM``: the channel
    mask, or also the step masks of u, delta, z), split or not, and the real pass with its own
    32-bit offsets / loads ahead / load masks (``LANE_REAL_*``): outputs, checkpoints and
    gradients against float64, and the constexprs each pass got."""
    seen, expected = _even_load_masks(monkeypatch, ldm, real)
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)
    assert seen and all(s == expected[s[0]] for s in seen), seen


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("lt", [3, 7])
@pytest.mark.parametrize("batch,dim,L,N,groups", [c for c in GPU_CASES if c.id in _UNROLLED_CASES])
def test_triton_gpu_forward_local_tiles(batch, dim, L, N, groups, dtype, lt, monkeypatch):
    """``triton_fwd.LANE_LOCAL_TILES`` on the GPU: the local pass in segments of 3 or 7 tiles
    against real segments of a third of L (snapshots where real segments start inside local
    ones): outputs, checkpoints and gradients against float64."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_SEGMENTS", 3)
    monkeypatch.setattr(triton_fwd, "LANE_LOCAL_TILES", lt)
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)
    assert triton_fwd.FWD_VARIANT == "lane"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("bcast", [0, 2], ids=["per-step", "one-asm"])
@pytest.mark.parametrize("batch,dim,L,N,groups", [c for c in GPU_CASES if c.id in _UNROLLED_CASES])
def test_triton_gpu_lane_broadcast_modes(batch, dim, L, N, groups, dtype, bcast, monkeypatch):
    """``triton_fwd.LANE_BCAST_TILE`` 0 (a shuffle per step) and 2 (one asm a tile, also for
    fp32; the default, 1, runs it for 16-bit inputs in the other GPU tests): the lane forward
    and the backward's states kernel, outputs, checkpoints and gradients against float64. (The
    interpreter has no inline asm: these modes are GPU-only.)"""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_BCAST_TILE", bcast)
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)
    assert triton_fwd.FWD_VARIANT == "lane"


@pytest.mark.triton
@_INTERP
def test_triton_interpreter_forward_without_y_scatter(monkeypatch):
    """``triton_fwd.LANE_Y_SCATTER`` off: the lane forward reduces y per step (in segments)."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_Y_SCATTER", False)
    _run_case(1, 3, 141, 16, None, True, True, True, torch.float32, True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("batch,dim,L,N,groups", [c for c in GPU_CASES if c.id in _UNROLLED_CASES])
def test_triton_gpu_forward_unrolled(batch, dim, L, N, groups, dtype, segmenting, monkeypatch):
    """The lane forward unrolled (``triton_fwd.FWD_UNROLL`` = (2, 2)) on the GPU: outputs,
    checkpoints and gradients against float64."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "FWD_UNROLL", (2, 2))
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)
    assert triton_fwd.FWD_VARIANT == "lane"


# the split backward on the GPU: L a multiple of 16 (``triton_bwd_split.applies``), one partial
# last chunk (784 = 3 x 256 + 16), groups, N 12 padded to 16; L = 600 falls back to tile_rs
SPLIT_GPU_CASES = [
    pytest.param(2, 64, 512, 16, None, id="B2-D64-L512-N16"),
    pytest.param(1, 64, 784, 16, 2, id="B1-D64-L784-N16-G2"),
    pytest.param(4, 2048, 768, 16, None, id="B4-D2048-L768-N16"),
    pytest.param(1, 96, 2048, 12, 3, id="B1-D96-L2048-N12-G3"),
    pytest.param(1, 64, 600, 16, None, id="B1-D64-L600-N16-fallback"),
]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"]
)
@pytest.mark.parametrize("batch,dim,L,N,groups", SPLIT_GPU_CASES)
def test_triton_gpu_split_backward(batch, dim, L, N, groups, dtype, split_backward):
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)
    assert split_backward == [L % 16 == 0]
    from ssmscan.ops.selective_scan import triton_bwd

    assert triton_bwd.BWD_VARIANT == split_backward.variant  # no layout-check fallback


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "batch,dim,L,N,groups",
    [(2, 64, 512, 16, None), (1, 96, 2048, 12, 3), (4, 2048, 768, 16, None)],
    ids=["B2-D64-L512", "B1-D96-L2048-N12-G3", "B4-D2048-L768"],
)
def test_triton_gpu_finish_kernel(batch, dim, L, N, groups, dtype, monkeypatch):
    """``FINISH_KERNEL`` (the default) on the GPU; the partials' sum is in fixed order, so two
    runs agree bit for bit (and under ``torch.use_deterministic_algorithms(True)``)."""
    from ssmscan.ops.selective_scan import triton_bwd

    monkeypatch.setattr(triton_bwd, "FINISH_KERNEL", True)
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
    from ssmscan.ops.common import triton_launch

    kw, dout, dlast = _inputs(2, 64, 512, 16, None, True, True, True, dtype, "cuda", seed=5)
    runs = []
    for k, fast in ((0, True), (1, True), (0, True), (1, False)):
        triton_launch.FAST_EAGER = fast
        try:
            moved = {n: _offset(v, k) if isinstance(v, torch.Tensor) else v for n, v in kw.items()}
            outs, grads = _run_launchers(moved, _offset(dout, k), _offset(dlast, k))
        finally:
            triton_launch.FAST_EAGER = True
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
    [kernel sources under Inductor]). That case was added in the thirteenth session and has
    not run as a test yet; the same path compiled in ``compiled_step.py`` on the H200 then,
    gradients equal to eager's."""
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
    torch's mutation analysis until the thirteenth session: Note [traced kernels' inline asm]):
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


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
def test_lane_backward_prefetches_only_in_eager(traced, monkeypatch):
    """Note [traced kernels' inline asm]: the lane main kernel's L1 prefetch (a non-pure inline
    asm, which stops torch's mutation analysis of a traced launch) is passed on only when the
    launch is not traced (``wrap_triton`` off); everything else about the launch is the same."""
    from torch._library.triton import set_wrap_triton_enabled

    from ssmscan.ops.selective_scan import shapes, triton_bwd, triton_bwd_lane

    monkeypatch.setattr(triton_bwd, "BWD_VARIANT", "lane")
    monkeypatch.setattr(triton_bwd_lane, "PREFETCH_BC", True)
    seen: dict[str, dict] = {}

    def fake_launcher(kernel, *a):  # records the launch, runs nothing
        class Grid:
            def __getitem__(self, grid):
                return lambda *args, **kw: seen.setdefault(kernel.__name__, kw)

        return Grid()

    monkeypatch.setattr(triton_bwd, "launcher", fake_launcher)
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
@pytest.mark.parametrize("dim,L,want", [(32, 141, 5), (64, 45, 0), (48, 77, 3)])
def test_triton_interpreter_forward_two_channels(dim, L, want, monkeypatch):
    """``triton_fwd.LANE_CH2`` (Note [selective scan forward two channels a thread]): the real
    pass with two channels a thread, in segments of tiles (5, 3: boundaries inside 16-step
    checkpoint chunks) or in one (``want`` 0: 64 channels, 2 warps a segment, above the split's
    target), the last program's second half past ``dim`` (48 channels: 32 a program). Outputs,
    checkpoints (through the backward), last state and gradients against float64, and that the
    kernel ran."""
    from ssmscan.ops.selective_scan import shapes, triton_bwd, triton_fwd

    for mod in (shapes, triton_fwd, triton_bwd, sys.modules[__name__]):
        monkeypatch.setattr(mod, "CHECKPOINT_LEN", 16)
    monkeypatch.setattr(triton_fwd, "FWD_VARIANT", "lane")
    monkeypatch.setattr(triton_fwd, "LANE_CH2", 1)
    if want:
        monkeypatch.setattr(triton_fwd, "LANE_SEGMENTS", want)
    else:
        monkeypatch.setattr(triton_fwd.triton_common, "SPLIT_BELOW_WARPS", 0)
    names: list[str] = []
    real = triton_fwd.launcher

    def spy(kernel, *a):
        names.append(kernel.__name__)
        return real(kernel, *a)

    monkeypatch.setattr(triton_fwd, "launcher", spy)
    _run_case(1, dim, L, 16, None, True, True, True, torch.float32, True)
    assert "_selective_scan_fwd_lane2_kernel" in names


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"]
)
@pytest.mark.parametrize("want", [0, 3, 22])
@pytest.mark.parametrize("batch,dim,L,N,groups", [c for c in GPU_CASES if c.id in _UNROLLED_CASES])
def test_triton_gpu_forward_two_channels(batch, dim, L, N, groups, dtype, want, monkeypatch):
    """``triton_fwd.LANE_CH2`` on the GPU (where the geometry has it: 16 states), as the
    library picks segments (0) and in segments of tiles: outputs, checkpoints and gradients
    against float64."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_CH2", 1)
    if want:
        monkeypatch.setattr(triton_fwd, "LANE_SEGMENTS", want)
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)
    assert triton_fwd.FWD_VARIANT == "lane"


def _spy_rows(monkeypatch):
    """Record (kernel, its ``BC16``, Bt's dtype) of every forward launch (``triton_fwd``)."""
    from ssmscan.ops.selective_scan import triton_fwd

    seen: list[tuple] = []

    def record(name, grid, kw):
        if "Bt" in kw:
            seen.append((name, kw.get("BC16", 0), kw["Bt"].dtype))

    _record_launches(monkeypatch, triton_fwd, record)
    return seen


@pytest.mark.triton
@_INTERP
@pytest.mark.parametrize(
    "dt,ch2,dim", [("bf16", 1, 48), ("fp16", 0, 3)], ids=["bf16-two-channels", "fp16-one-channel"]
)
def test_triton_interpreter_forward_rows16(dt, ch2, dim, monkeypatch):
    """``triton_fwd.LANE_BC16`` = 1 (Note [selective scan forward 16-bit rows]): B / C rows
    copied in the inputs' bf16 (pairs in int32 words, unpacked by bit operations) or fp16, in
    both passes, in segments of tiles whose boundaries fall inside 16-step checkpoint chunks.
    Outputs, checkpoints (through the backward), last state and gradients against float64, and
    that both passes got the 16-bit rows."""
    from ssmscan.ops.selective_scan import shapes, triton_bwd, triton_fwd

    for mod in (shapes, triton_fwd, triton_bwd, sys.modules[__name__]):
        monkeypatch.setattr(mod, "CHECKPOINT_LEN", 16)
    monkeypatch.setattr(triton_fwd, "FWD_VARIANT", "lane")
    monkeypatch.setattr(triton_fwd, "LANE_CH2", ch2)
    monkeypatch.setattr(triton_fwd, "LANE_SEGMENTS", 3)
    monkeypatch.setattr(triton_fwd, "LANE_BC16", 1)
    seen = _spy_rows(monkeypatch)
    _run_case(1, dim, 141, 16, None, True, True, True, _DTYPES[dt], True)
    real = "_selective_scan_fwd_lane2_kernel" if ch2 else "_selective_scan_fwd_lane_kernel"
    code, rows = (1, torch.int32) if dt == "bf16" else (2, torch.float16)
    assert seen == [("_selective_scan_fwd_lane_kernel", code, rows), (real, code, rows)]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("ch2", [0, 1], ids=["one-channel", "two-channels"])
@pytest.mark.parametrize("want", [0, 3])
@pytest.mark.parametrize("batch,dim,L,N,groups", [c for c in GPU_CASES if c.id in _UNROLLED_CASES])
def test_triton_gpu_forward_rows16(batch, dim, L, N, groups, dtype, ch2, want, monkeypatch):
    """``triton_fwd.LANE_BC16`` = 1 on the GPU, with the one- and the two-channel real pass, as
    the library picks segments (0) and in 3 segments of tiles: outputs, checkpoints and
    gradients against float64, and the 16-bit rows where the geometry has them (bf16: an even
    number of states a lane)."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_CH2", ch2)
    monkeypatch.setattr(triton_fwd, "LANE_BC16", 1)
    if want:
        monkeypatch.setattr(triton_fwd, "LANE_SEGMENTS", want)
    seen = _spy_rows(monkeypatch)
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)
    assert triton_fwd.FWD_VARIANT == "lane"
    assert seen and all(bc16 in (1, 2) for _, bc16, _ in seen), seen


def test_ch2_rows16_policy(monkeypatch):
    """``triton_fwd.ch2_rows16`` on a 132-multiprocessor device (no GPU needed): 16-bit rows
    (``LANE_BC16`` = 2) only where the two-channel pass fills its waves with them and not with
    fp32 rows: (8, 4096, 2048) (2048 one-channel, 1024 two-channel programs of 2 warps: 1.29
    waves of 6 at 160 registers, 0.97 of 8 at 128), not (16, 1536, 1024) (768: 0.97 of 6)."""
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "_sm_count", lambda index: 132)
    dev = torch.device("cuda", 0)
    monkeypatch.setattr(triton_fwd, "LANE_BC16", 2)
    assert triton_fwd.ch2_rows16(2048, 1024, 2, dev, True) == (True, True)
    assert triton_fwd.ch2_rows16(1536, 768, 2, dev, True) == (True, False)
    assert triton_fwd.ch2_rows16(2048, 1024, 2, dev, False) == (False, False)
    monkeypatch.setattr(triton_fwd, "LANE_BC16", 1)
    assert triton_fwd.ch2_rows16(1536, 768, 2, dev, True) == (True, True)
    # off CUDA (the interpreter): two channels, fp32 rows unless LANE_BC16 = 1
    monkeypatch.setattr(triton_fwd, "LANE_BC16", 2)
    assert triton_fwd.ch2_rows16(2048, 1024, 2, torch.device("cpu"), True) == (True, False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_compile_fullgraph_rows16_gpu(dtype, monkeypatch):
    """The 16-bit B / C rows (``LANE_BC16`` = 1: their copy and, for bf16, its int32 view
    inside the traced op) under ``torch.compile(fullgraph=True)``: a training step's loss and
    gradients equal eager's, every traced lane launch's layout checked."""
    import ssmscan  # noqa: F401  (registers the ops)
    from ssmscan.ops.selective_scan import triton_fwd

    monkeypatch.setattr(triton_fwd, "LANE_BC16", 1)
    kw = make_selective_scan_inputs(2, 64, 512, 16, dtype=dtype, device="cuda")
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
    args = [kw[k] for k in names]

    def loss_fn(u, delta, A, B, C, D, z, delta_bias):
        out, last, _ = torch.ops.ssmscan.selective_scan_fwd(
            u, delta, A, B, C, D, z, delta_bias, None, True
        )
        return out.float().square().mean() + last.square().mean()

    def step(fn):
        leaves = [a.detach().clone().requires_grad_() for a in args]
        loss = fn(*leaves)
        loss.backward()
        return loss.detach(), [x.grad for x in leaves]

    eager, eager_grads = step(loss_fn)
    with warnings.catch_warnings():  # Note [traced layout checks]: each checked, none skipped
        warnings.filterwarnings("error", message="ssmscan: could not compile")
        got, grads = step(torch.compile(loss_fn, fullgraph=True))
    assert triton_launch._TRACE_CHECKED, "no traced launch was checked"
    assert not any(triton_launch._TRACE_CHECKED.values()), triton_launch._TRACE_CHECKED
    torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-6)
    for k, g, ref in zip(names, grads, eager_grads):
        torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-6, msg=k)


def test_prep_bc_lane_refuses_a_rounding_copy():
    """``prep_BC_lane`` copies B / C in a 16-bit dtype only where both are of it (exact); a
    bf16 copy of fp32 B would round it: a ValueError naming both dtypes, before any launch."""
    from ssmscan.ops.selective_scan.triton_common import prep_BC_lane

    B = torch.randn(1, 16, 8)
    C = torch.randn(1, 16, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"B \(torch.float32\) and C \(torch.bfloat16\)"):
        prep_BC_lane(B, C, 1, 16, 16, torch.bfloat16)
