"""The lane forward's layout check (Note [selective scan forward lanes]): the TTGIR reader on
hand-written layouts, the real kernel compiled for sm_90 without a GPU (``lane_layout_check.py``,
in a process without TRITON_INTERPRET), and the launcher's fallback to the 2-D kernel when the
check fails."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")

from ssmscan.ops.selective_scan import triton_fwd
from ssmscan.ops.selective_scan.layout_check import LaneLayoutError, lane_layout_problem
from ssmscan.ops.selective_scan.plan import Policy, lane_geometry

_OP = (
    '%r = tt.elementwise_inline_asm "shfl.sync.idx.b32 $0, $1, $2, $3, -1;" {constraints = '
    '"=r,r,r,r", packed_element = 1 : i32, pure = true} %vi, %a, %b : tensor<32x4xi32, {enc}>, '
    "tensor<32x4xi32, {enc}> -> tensor<32x4xi32, {enc}>"
)


def _ttgir(defs: str, enc: str) -> str:
    return defs + "\nmodule {\n  " + _OP.replace("{enc}", enc) + "\n}\n"


GOOD = "#blocked = #ttg.blocked<{sizePerThread = [1, 1], threadsPerWarp = [8, 4], warpsPerCTA = [4, 1], order = [1, 0]}>"
# the channels on the lanes (what 3-D offsets give): k on the warps
CHANNELS = "#blocked = #ttg.blocked<{sizePerThread = [1, 1], threadsPerWarp = [32, 1], warpsPerCTA = [1, 4], order = [0, 1]}>"
PARENT = "#blocked = #ttg.blocked<{sizePerThread = [1, 1, 4], threadsPerWarp = [8, 4, 1], warpsPerCTA = [4, 1, 1], order = [2, 1, 0]}>"
# lane bit 0 on the sliced dimension: the 4 columns on lane bits 1-2 (NP = 64 in bf16)
PARENT_REPL = "#blocked = #ttg.blocked<{sizePerThread = [1, 1, 4], threadsPerWarp = [4, 4, 2], warpsPerCTA = [4, 1, 1], order = [2, 1, 0]}>"
SLICE = "#ttg.slice<{dim = 2, parent = #blocked}>"
LINEAR = "#linear = #ttg.linear<{register = [], lane = [[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]], warp = [[8, 0], [16, 0]], block = []}>"
LINEAR_SWAP = "#linear = #ttg.linear<{register = [], lane = [[0, 2], [0, 1], [1, 0], [2, 0], [4, 0]], warp = [[8, 0], [16, 0]], block = []}>"
LINEAR_REG = "#linear = #ttg.linear<{register = [[0, 1]], lane = [[0, 2], [1, 0], [2, 0], [4, 0], [8, 0]], warp = [[16, 0]], block = []}>"


@pytest.mark.parametrize(
    "defs,enc,ok",
    [
        pytest.param(GOOD, "#blocked", True, id="blocked"),
        pytest.param(CHANNELS, "#blocked", False, id="blocked-channels-on-lanes"),
        pytest.param(PARENT, SLICE, True, id="slice"),
        pytest.param(PARENT_REPL, SLICE, False, id="slice-replicated-lane-bit"),
        pytest.param(LINEAR, "#linear", True, id="linear"),
        pytest.param(LINEAR_SWAP, "#linear", False, id="linear-lane-bits-swapped"),
        pytest.param(LINEAR_REG, "#linear", False, id="linear-column-in-registers"),
        pytest.param("", "#blocked", False, id="undefined-alias"),
    ],
)
def test_lane_layout_problem(defs, enc, ok):
    problem = lane_layout_problem(_ttgir(defs, enc), 4)
    assert (problem is None) == ok, problem


def test_lane_layout_problem_without_shuffles():
    assert lane_layout_problem(GOOD + "\nmodule {}\n", 4) == "no shfl.sync.idx in the TTGIR"
    assert lane_layout_problem(GOOD + "\nmodule {}\n", 1) is None  # one lane a channel: none


def test_lane_layout_problem_wrong_width():
    assert lane_layout_problem(_ttgir(GOOD, "#blocked"), 8) is not None


def test_lane_layout_problem_reads_butterflies_when_asked():
    """The forward's check (``bfly``) reads the ``_y_scatter`` butterflies too; the backward's
    (which shuffles rows with them) only the broadcasts."""
    bfly = _OP.replace("idx.b32 $0, $1, $2, $3", "bfly.b32 $0, $1, 2, 0x1f").replace(
        "{enc}", "#bad"
    )
    bad = CHANNELS.replace("#blocked =", "#bad =")
    text = GOOD + "\n" + bad + "\nmodule {\n  " + _OP.replace("{enc}", "#blocked") + "\n  "
    text += bfly + "\n}\n"
    assert lane_layout_problem(text, 4) is None
    assert "has layout" in lane_layout_problem(text, 4, bfly=True)
    good_bfly = GOOD + "\nmodule {\n  " + bfly.replace("#bad", "#blocked") + "\n}\n"
    assert lane_layout_problem(good_bfly, 4, bfly=True) is None


def test_lane_geometry():
    assert [lane_geometry(n) for n in (4, 8, 16, 32)] == [(1, 4), (2, 4), (4, 2), (8, 1)]


@pytest.mark.triton
@pytest.mark.slow
def test_lane_forward_shuffle_layouts():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = os.path.join(os.path.dirname(__file__), "lane_layout_check.py")
    res = subprocess.run(
        [sys.executable, script], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode in (0, 3), res.stdout + res.stderr[-3000:]
    # the layouts (29 configurations, 2 traced backward ones) and the traced kernels' inline asm
    assert res.stdout.count(" ok") == 32, res.stdout
    if res.returncode == 3:
        import triton

        pytest.skip(
            f"every layout right, but on Triton {triton.__version__} the NP = 64 negative control "
            "lays out right too, so the lane check's sensitivity is not shown here (it is on "
            "Triton 3.6, the GPU machine's)"
        )


def test_small_kernels_compile_for_sm90():
    """The B / C copy and the finish kernel through the real compiler (the interpreter tests
    run neither through it): ``small_kernels_compile_check.py`` in a process without
    TRITON_INTERPRET."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = os.path.join(os.path.dirname(__file__), "small_kernels_compile_check.py")
    res = subprocess.run(
        [sys.executable, script], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert res.stdout.count(" ok") == 7, res.stdout


def test_launch_falls_back_to_the_2d_kernel_per_call(monkeypatch):
    """A lane kernel that fails its layout check (raised before its first launch) sends this call
    to its plan's fallback (the 2-D kernel), with a warning; the next call tries the lane plan
    again: the fallback is the plan's, not the process's."""
    from ssmscan.ops.selective_scan.plan import H200, plan_forward

    calls = []

    def fake_launch(*args):
        plan, _options = args[-2:]
        calls.append(plan.kernel)
        if plan.kernel == "lane":
            raise LaneLayoutError("laid out differently")

    monkeypatch.setattr(triton_fwd, "_launch", fake_launch)
    plan = plan_forward(1, 64, 512, 16, 1, torch.float32, (torch.float32,) * 2, True, H200)
    x = torch.zeros(1, 1, 1)
    for _ in range(2):
        with pytest.warns(UserWarning, match="laid out differently; this call runs the 2-D"):
            triton_fwd.launch(*([x] * 9), True, x, x, x, plan=plan)
    assert calls == ["lane", "tile", "lane", "tile"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_lane_layout_check_passes_on_the_gpu(dtype, recwarn):
    """The eager launcher's check (every kernel it compiles) accepts what the GPU's Triton made of
    the lane kernel at each geometry, aligned and odd L: no fallback, no warning."""
    from ssmscan.ops.selective_scan import layout_check
    from ssmscan.ops.selective_scan import op as _op  # noqa: F401  (registers the ops)
    from ssmscan.testing import make_selective_scan_inputs

    seen = []
    real = layout_check.check_lane_layout

    def counting(KL, bfly=False):
        check = real(KL, bfly)

        def wrapped(compiled):
            seen.append(KL)
            check(compiled)

        return wrapped

    from ssmscan.ops.common import triton_launch

    mp = pytest.MonkeyPatch()
    mp.setattr(triton_fwd, "check_lane_layout", counting)
    # a fresh eager launch cache, so that every specialization below is a miss (and checked)
    mp.setattr(triton_launch, "_PARAMS", {})
    try:
        for N, L in ((8, 63), (16, 2048), (16, 1001), (32, 512)):
            kw = make_selective_scan_inputs(1, 64, L, N, dtype=dtype, device="cuda")
            # through the op: its eager CUDA body is where the launcher checks what it compiles
            torch.ops.ssmscan.selective_scan_fwd(
                kw["u"], kw["delta"], kw["A"], kw["B"], kw["C"], kw["D"], kw["z"],
                kw["delta_bias"], None, True,
            )  # fmt: skip
    finally:
        mp.undo()
    torch.cuda.synchronize()
    assert not [w for w in recwarn if "lane" in str(w.message)]
    assert sorted(set(seen)) == [2, 4, 8], seen


def test_padded_steps():
    from ssmscan.ops.selective_scan.plan import padded_steps

    for L in (1, 7, 8, 63, 2048, 2047):
        for TT in (4, 8):
            LP = padded_steps(L, TT)
            # whole tiles plus the prefetch's one more, Triton-visible 16-divisibility
            assert LP >= (-(-L // TT) + 1) * TT and LP % 16 == 0, (L, TT, LP)


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
    reason="runs its Triton kernel under TRITON_INTERPRET=1 or on a GPU",
)
@pytest.mark.parametrize("N,NP", [(16, 16), (12, 16)])
def test_prep_bc_lane_copies_and_pads_with_zeros(N, NP):
    """The lane kernels compute the last tile's padded steps with dt = 0 (decay 1, input 0 * B):
    those B / C rows must be finite, so zero; padded states too. ``prep_BC_lane`` makes both
    copies in one launch from any strides (here a transposed C, a 3-D B); ``prep_BC`` the 2-D
    kernels' (no time padding)."""
    from ssmscan.ops.selective_scan.triton_common import prep_BC, prep_BC_lane

    dev = "cuda" if os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    L, steps = 21, 48
    X = torch.randn(2, 3, N, L, device=dev)
    Y = torch.randn(2, 3, L, N, device=dev).transpose(2, 3)  # C not contiguous
    bt, ct = prep_BC_lane(X, Y, 2, NP, steps)
    for xt, x in ((bt, X), (ct, Y)):
        assert xt.shape == (2, 3, steps, NP) and xt.dtype == torch.float32
        torch.testing.assert_close(xt[:, :, :L, :N], x.transpose(2, 3), rtol=0, atol=0)
        assert (xt[:, :, L:] == 0).all()  # padded steps
        assert (xt[:, :, :, N:] == 0).all()  # padded states
    b3, c3 = prep_BC_lane(X[:, 0], Y[:, 1].to(torch.bfloat16), 2, NP, 24)  # 3-D, mixed dtypes
    assert b3.shape == (2, 1, 24, NP)
    torch.testing.assert_close(b3[:, 0, :L, :N], X[:, 0].transpose(1, 2), rtol=0, atol=0)
    torch.testing.assert_close(
        c3[:, 0, :L, :N], Y[:, 1].to(torch.bfloat16).float().transpose(1, 2), rtol=0, atol=0
    )
    grouped = prep_BC(X[:, 0], 2, NP)  # 3-D B, no time padding: (batch, 1, L, NP)
    assert grouped.shape == (2, 1, L, NP)
    torch.testing.assert_close(grouped[:, 0, :, :N], X[:, 0].transpose(1, 2), rtol=0, atol=0)


def test_split_cap_only_beyond_the_waves():
    """The split lane forward's real pass is capped at ``Policy.split_regs`` (128) registers
    beyond two waves of 8 two-warp programs per multiprocessor (132 on the H200), not below, not
    under the interpreter."""
    from ssmscan.ops.selective_scan.plan import H200, INTERPRETED, plan_forward

    def cap(batch, dim, L, facts=H200):
        plan = plan_forward(batch, dim, L, 16, 1, torch.float32, (torch.float32,) * 2, True,
                            facts, Policy(two_channels=False))  # fmt: skip
        return plan.real.kw().get("maxnreg"), plan.nseg

    assert cap(1, 1024, 65536) == (128, 66)  # 4224 programs: 4 waves of 1056
    assert cap(1, 1536, 4096) == (None, 22)  # 2112 programs: two waves
    assert cap(1, 1024, 65536, INTERPRETED) == (None, 64)


def test_fill_waves_fills_the_real_pass_waves():
    """``plan.fill_waves``: as many segments as fill the waves (8 two-warp programs per
    multiprocessor at 128 registers, 132 multiprocessors) that the chunk policy's count starts;
    that count where it is one wave or less, and under the interpreter."""
    from ssmscan.ops.selective_scan.plan import H200, INTERPRETED, fill_waves

    assert fill_waves(96, 16, 2, 128, H200) == 22  # (1, 1536, 4096): 1.45 -> 2 waves
    assert fill_waves(64, 64, 2, 128, H200) == 66  # (1, 1024, 65536): 3.9 -> 4 waves
    assert fill_waves(192, 16, 2, 128, H200) == 16  # (2, 1536, 4096): 2.9 -> 3, as it was
    assert fill_waves(4, 3, 2, 128, H200) == 3  # a fraction of a wave: unchanged
    assert fill_waves(96, 32, 1, 128, H200) == 44  # one-warp programs: 16 a multiprocessor
    assert fill_waves(96, 16, 2, 128, INTERPRETED) == 16
