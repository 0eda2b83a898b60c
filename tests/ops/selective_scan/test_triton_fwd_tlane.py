"""The time-lane forward (Note [selective scan forward time lanes]): under the interpreter
against the float64 reference (outputs, last state; the checkpoints through the backward that
reads them), at odd lengths, with and without the optional inputs, grouped B / C; the kernel was
the one that ran; the layout check on hand-written TTGIR and on the kernel compiled for sm_90
(``tlane_layout_check.py``, a process without TRITON_INTERPRET); the launcher's fallback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")

from ssmscan.ops.selective_scan import triton_fwd, triton_fwd_tlane
from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs

_NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")
_INTERPRET = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1"
)


@pytest.fixture
def time_lanes(monkeypatch):
    """FWD_TIME_LANES on at any channel count, and the calls of the time-lane launcher
    counted."""
    calls = []
    real = triton_fwd._launch_tlane
    monkeypatch.setattr(triton_fwd, "FWD_TIME_LANES", True)
    monkeypatch.setattr(triton_fwd, "TLANE_MIN_CHANNELS", 0)
    monkeypatch.setattr(triton_fwd, "_launch_tlane", lambda *a: calls.append(1) or real(*a))
    return calls


_CASES = {
    # id: batch, dim, L, G, dtype, optional inputs, initial state
    "B1-D3-L1-fp32": (1, 3, 1, None, torch.float32, True, True),
    "B1-D3-L63-fp32": (1, 3, 63, None, torch.float32, True, False),
    "B2-D2-L64-fp32-bare": (2, 2, 64, None, torch.float32, False, False),
    "B1-D3-L1000-fp32-init": (1, 3, 1000, None, torch.float32, True, True),
    "B1-D4-L300-bf16-G2": (1, 4, 300, 2, torch.bfloat16, True, True),
    "B2-D2-L129-fp16": (2, 2, 129, None, torch.float16, True, False),
}


@pytest.mark.triton
@_INTERPRET
@pytest.mark.parametrize(
    "case,bc_mode,warps",
    [(c, 0, 1) for c in _CASES]
    + [("B1-D3-L1000-fp32-init", 1, 1), ("B1-D4-L300-bf16-G2", 2, 1), ("B1-D3-L63-fp32", 2, 1)]
    + [("B1-D3-L1000-fp32-init", 0, 2), ("B1-D4-L300-bf16-G2", 1, 2), ("B2-D2-L129-fp16", 0, 2)]
    + [("B1-D3-L63-fp32", 2, 2), ("B2-D2-L64-fp32-bare", 0, 2), ("B1-D3-L1-fp32", 0, 2)]
    + [("B1-D4-L300-bf16-G2", "r16", 1), ("B2-D2-L129-fp16", "r16", 1),
       ("B1-D4-L300-bf16-G2", "r16-bc2", 1), ("B2-D2-L129-fp16", "r16-bc1", 2)]
    + [("B1-D4-L300-bf16-G2", "ch2-r16-bc2", 1), ("B2-D2-L129-fp16", "ch2-bc1", 1),
       ("B1-D3-L1000-fp32-init", "ch2-bc2", 1), ("B2-D2-L64-fp32-bare", "ch2-bc1", 1),
       ("B1-D3-L1-fp32", "ch2-bc2", 1)]
    + [(c, "chain", 1) for c in _CASES] + [("B1-D4-L300-bf16-G2", "chain-r16", 1),
                                           ("B2-D2-L129-fp16", "chain-r16", 1)],
    ids=[*_CASES, "B1-D3-L1000-fp32-init-bc1", "B1-D4-L300-bf16-G2-bc2", "B1-D3-L63-fp32-bc2",
         "B1-D3-L1000-fp32-init-w2", "B1-D4-L300-bf16-G2-bc1-w2", "B2-D2-L129-fp16-w2",
         "B1-D3-L63-fp32-bc2-w2", "B2-D2-L64-fp32-bare-w2", "B1-D3-L1-fp32-w2",
         "B1-D4-L300-bf16-G2-rows16", "B2-D2-L129-fp16-rows16", "B1-D4-L300-bf16-G2-rows16-bc2",
         "B2-D2-L129-fp16-rows16-bc1-w2", "B1-D4-L300-bf16-G2-ch2-rows16-bc2",
         "B2-D2-L129-fp16-ch2-bc1", "B1-D3-L1000-fp32-init-ch2-bc2 (odd dim: one channel)",
         "B2-D2-L64-fp32-bare-ch2-bc1", "B1-D3-L1-fp32-ch2-bc2 (odd dim: one channel)",
         *(f"{c}-chain" for c in _CASES), "B1-D4-L300-bf16-G2-chain-r16",
         "B2-D2-L129-fp16-chain-r16"],
)  # fmt: skip
def test_time_lane_forward_matches_reference(case, bc_mode, warps, time_lanes, monkeypatch):
    """Every ``TLANE_BC_MODE`` (where B / C rows are loaded), ``TLANE_WARPS`` (warps a
    channel), 16-bit rows (``TLANE_BC16``, "r16": bf16 pairs as int32 words, fp16) and two
    channels a warp (``TLANE_CH2``, "ch2"; an odd number of channels takes the one-channel
    kernel) on some of the cases."""
    from torch._library.triton import set_wrap_triton_enabled

    if isinstance(bc_mode, str):  # "[ch2-|chain][r16][-bcM]"
        monkeypatch.setattr(triton_fwd, "TLANE_BC16", "r16" in bc_mode)
        monkeypatch.setattr(triton_fwd, "TLANE_CH2", "ch2" in bc_mode)
        monkeypatch.setattr(triton_fwd, "TLANE_CHAIN", "chain" in bc_mode)
        bc_mode = int(bc_mode[-1]) if "bc" in bc_mode else 0
    monkeypatch.setattr(triton_fwd, "TLANE_BC_MODE", bc_mode)
    monkeypatch.setattr(triton_fwd, "TLANE_WARPS", warps)
    batch, dim, L, G, dtype, opt, init = _CASES[case]
    kw = make_selective_scan_inputs(
        batch, dim, L, 16, groups=G, dtype=dtype, device="cpu", has_D=opt, has_z=opt,
        has_delta_bias=opt, delta_softplus=opt, has_initial_state=init, seed=L,
    )  # fmt: skip
    args = [kw[k] for k in _NAMES]
    with set_wrap_triton_enabled(False):
        out, last, ckpt = triton_fwd.forward(*args, opt)
    assert time_lanes == [1]
    d64 = [a.double() if a is not None else None for a in args]
    r_out, r_last = selective_scan_reference(*d64[:8], opt, True, d64[8])
    assert_close_to_reference("out", out, r_out, dtype)
    assert_close_to_reference("last_state", last, r_last, dtype)
    # the checkpoints: entry c the state before step 256 c (the last entry the final state)
    assert_close_to_reference("final checkpoint", ckpt[:, :, -1], r_last, dtype)
    for c in range(ckpt.shape[2] - 1):
        if c == 0:
            ref = d64[8] if init else torch.zeros_like(r_last)
        else:
            cut = [a[..., : 256 * c] if a is not None and a.dim() > 2 else a for a in d64[:8]]
            ref = selective_scan_reference(*cut, opt, True, d64[8])[1]
        assert_close_to_reference(f"checkpoint {c}", ckpt[:, :, c], ref, dtype)


@pytest.mark.triton
@_INTERPRET
def test_backward_from_time_lane_checkpoints(time_lanes):
    """The backward recomputes from the forward's checkpoints: from the time-lane kernel's,
    every gradient matches the float64 reference."""
    from ssmscan.ops.selective_scan import eager

    kw = make_selective_scan_inputs(
        1, 3, 300, 16, dtype=torch.float32, device="cpu", has_initial_state=True, seed=5
    )
    ins = {k: kw[k].clone().requires_grad_() for k in _NAMES}
    out, last = eager.selective_scan(*(ins[k] for k in _NAMES), True)
    assert time_lanes == [1]
    g = torch.Generator().manual_seed(1)
    g_out = torch.randn(out.shape, generator=g)
    loss = (out * g_out).sum() + last.sum()
    grads = torch.autograd.grad(loss, [ins[k] for k in _NAMES])
    r = {k: v.detach().double().requires_grad_() for k, v in ins.items()}
    r_out, r_last = selective_scan_reference(*(r[k] for k in _NAMES[:8]), True, True,
                                             r["initial_state"])  # fmt: skip
    r_grads = torch.autograd.grad((r_out * g_out.double()).sum() + r_last.sum(),
                                  [r[k] for k in _NAMES])  # fmt: skip
    for k, gr, rg in zip(_NAMES, grads, r_grads):
        assert_close_to_reference(f"d{k}", gr, rg, torch.float32)


def test_time_lanes_only_where_the_split_would_run(monkeypatch):
    """The launcher takes the time-lane kernel only with FWD_TIME_LANES, N = 16 and few warps
    (small batch x dim, where the lane forward would split L) but not too few channels
    (``TLANE_MIN_CHANNELS``): not at large batch x dim, not at 64 channels by default."""
    calls = []
    monkeypatch.setattr(triton_fwd, "FWD_TIME_LANES", True)
    monkeypatch.setattr(triton_fwd, "_launch_tlane", lambda *a: calls.append(a[0].shape))

    def run(batch, dim, N):
        kw = make_selective_scan_inputs(batch, dim, 8, N, device="meta")
        outs = [torch.empty(s, device="meta") for s in ((batch, dim, 8), (batch, dim, N),
                                                       (batch, dim, 2, N))]  # fmt: skip
        try:
            triton_fwd._launch(*(kw[k] for k in _NAMES), True, *outs)
        except Exception:  # meta tensors stop the lane path at its first launch
            pass

    run(1, 64, 16)  # too few channels
    run(1, 1536, 16)
    run(1, 1536, 8)  # N != 16
    run(64, 4096, 16)  # enough warps without a split
    assert calls == [(1, 1536, 8)]


GOOD = (
    "#blocked = #ttg.blocked<{sizePerThread = [1, 1, 4], threadsPerWarp = [8, 4, 1], "
    "warpsPerCTA = [1, 1, 1], order = [2, 1, 0]}>"
)
# the state lane on lane bits 2-3 and the time lane on 0-1 and 4: not what the shuffles assume
SWAPPED = (
    "#blocked = #ttg.blocked<{sizePerThread = [1, 1, 4], threadsPerWarp = [8, 4, 1], "
    "warpsPerCTA = [1, 1, 1], order = [2, 0, 1]}>"
)


def _ttgir(defs: str, asm: str = "shfl.sync.up.b32 $0, $1, 4, 0, -1;") -> str:
    op = (
        f'%r = tt.elementwise_inline_asm "{asm}" {{constraints = "=r,r", packed_element = 1 : '
        "i32, pure = true} %vi : tensor<8x4x4xi32, #blocked> -> tensor<8x4x4xi32, #blocked>"
    )
    return defs + "\nmodule {\n  " + op + "\n}\n"


def test_tlane_layout_problem():
    assert triton_fwd_tlane.tlane_layout_problem(_ttgir(GOOD)) is None
    assert triton_fwd_tlane.tlane_layout_problem(_ttgir(SWAPPED)) is not None
    bfly = _ttgir(SWAPPED, "shfl.sync.bfly.b32 $0, $1, 2, 0x1f, -1;")
    assert triton_fwd_tlane.tlane_layout_problem(bfly) is not None
    assert triton_fwd_tlane.tlane_layout_problem("module {}") == "no shuffle in the TTGIR"
    assert "cannot read" in triton_fwd_tlane.tlane_layout_problem(_ttgir(""))


@pytest.mark.triton
@pytest.mark.slow
def test_time_lane_kernel_layouts_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = os.path.join(os.path.dirname(__file__), "tlane_layout_check.py")
    res = subprocess.run(
        [sys.executable, script], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert res.stdout.count(" ok") == 46, res.stdout


def test_launch_falls_back_to_the_segments(monkeypatch):
    """A time-lane kernel failing its layout check (raised before its first launch) turns
    FWD_TIME_LANES off with a warning and the call takes the normal path."""
    from ssmscan.ops.selective_scan.triton_fwd_lane import LaneLayoutError

    def failing(*a):
        raise LaneLayoutError("laid out differently")

    monkeypatch.setattr(triton_fwd, "FWD_TIME_LANES", True)
    monkeypatch.setattr(triton_fwd, "_launch_tlane", failing)
    kw = make_selective_scan_inputs(1, 1024, 8, 16, device="meta")
    outs = [torch.empty(s, device="meta") for s in ((1, 1024, 8), (1, 1024, 16), (1, 1024, 2, 16))]
    with pytest.warns(UserWarning, match="laid out differently; using the segment split"):
        try:
            triton_fwd._launch(*(kw[k] for k in _NAMES), True, *outs)
        except LaneLayoutError:
            raise
        except Exception:  # the normal path on meta tensors stops at its first launch
            pass
    assert triton_fwd.FWD_TIME_LANES is False


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "shape", [(1, 64, 5000, None), (2, 96, 777, 2), (1, 32, 1, None)], ids=["L5000", "G2", "L1"]
)
@pytest.mark.parametrize(
    "warps,bc_mode,rows16,ch2",
    [(1, 0, False, False), (2, 0, False, False), (1, 0, True, False), (1, 2, True, False),
     (1, 2, True, True), (1, 1, False, True), (1, 0, False, "chain"), (1, 0, True, "chain")],
    ids=["w1", "w2", "w1-rows16", "w1-bc2-rows16", "ch2-bc2-rows16", "ch2-bc1", "chain",
         "chain-rows16"],
)  # fmt: skip
def test_time_lane_forward_gpu(dtype, shape, warps, bc_mode, rows16, ch2, time_lanes, recwarn,
                               monkeypatch):  # fmt: skip
    """On the GPU (the shuffles as PTX, the layout check on the compiled kernel), every
    ``TLANE_WARPS``, 16-bit rows (``TLANE_BC16``; bf16 and fp32 inputs, fp32 keeps fp32 rows)
    where they load and a tile ahead, two channels a warp (``TLANE_CH2``) and the chained tiles
    (``TLANE_CHAIN``, Note [selective scan forward time-lane chain]): outputs, last
    state and every gradient (the backward from the kernel's checkpoints) against float64 on
    fresh inputs; no fallback warning."""
    import ssmscan

    monkeypatch.setattr(triton_fwd, "TLANE_WARPS", warps)
    monkeypatch.setattr(triton_fwd, "TLANE_BC_MODE", bc_mode)
    monkeypatch.setattr(triton_fwd, "TLANE_BC16", rows16)
    monkeypatch.setattr(triton_fwd, "TLANE_CH2", ch2 is True)
    monkeypatch.setattr(triton_fwd, "TLANE_CHAIN", ch2 == "chain")
    batch, dim, L, G = shape
    kw = make_selective_scan_inputs(
        batch, dim, L, 16, groups=G, dtype=dtype, device="cuda", has_initial_state=True, seed=L
    )
    ins = {k: kw[k].clone().requires_grad_() for k in _NAMES}
    out, last = ssmscan.selective_scan(
        *(ins[k] for k in _NAMES[:8]), delta_softplus=True, return_last_state=True,
        initial_state=ins["initial_state"],
    )  # fmt: skip
    assert time_lanes == [1] and triton_fwd.FWD_TIME_LANES
    assert not [w for w in recwarn if "time-lane" in str(w.message)]
    g_out = torch.randn(out.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    grads = torch.autograd.grad((out.float() * g_out).sum() + last.sum(), list(ins.values()))
    r = {k: v.detach().double().requires_grad_() for k, v in ins.items()}
    r_out, r_last = selective_scan_reference(*(r[k] for k in _NAMES[:8]), True, True,
                                             r["initial_state"])  # fmt: skip
    assert_close_to_reference("out", out, r_out, dtype)
    assert_close_to_reference("last_state", last, r_last, dtype)
    r_grads = torch.autograd.grad((r_out * g_out.double()).sum() + r_last.sum(), list(r.values()))
    for k, gr, rg in zip(_NAMES, grads, r_grads):
        assert_close_to_reference(f"d{k}", gr, rg, dtype)
