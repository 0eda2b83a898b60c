"""ssmscan::gated_rms_norm and ssmscan::rms_norm: the CPU path and the Triton kernel (interpreter,
GPU) against the float64 reference, argument checks, fakes, opcheck."""

import os
import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ssmscan.ops.rms_norm.op  # noqa: F401  (registers the ops)
from ssmscan.models.mamba import RMSNorm
from ssmscan.models.mamba2 import GatedRMSNorm
from ssmscan.ops.rms_norm.reference import (
    add_rms_norm_reference,
    gated_rms_norm_reference,
    rms_norm_reference,
)
from ssmscan.testing import assert_close_to_reference

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
DTYPE_IDS = ["fp32", "bf16", "fp16"]
# (rows shape, dim, group_size): rows not a power of two, one group and several, odd groups
SHAPES = [((3,), 15, 15), ((3,), 15, 5), ((2, 3), 12, 4), ((1,), 7, 1)]
SHAPE_IDS = ["rows3-dim15-g15", "rows3-dim15-g5", "rows2x3-dim12-g4", "rows1-dim7-g1"]
INTERPRET = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)",
)
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _inputs(rows, dim, dtype, device="cpu", has_z=True, z_stride=0, seed=0):
    """x (rows..., dim), z as a slice of a wider tensor when z_stride > dim, weight (dim,)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*rows, dim, generator=g).to(device, dtype)
    z = None
    if has_z:
        wide = torch.randn(*rows, max(z_stride, dim), generator=g).to(device, dtype)
        z = wide[..., :dim]
    weight = (1.0 + 0.5 * torch.randn(dim, generator=g)).to(device)
    return x, z, weight


# ---- CPU path ----


@pytest.mark.parametrize("norm_before_gate", [False, True], ids=["gate-first", "norm-first"])
@pytest.mark.parametrize("has_z", [True, False], ids=["z", "no-z"])
@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64], ids=[*DTYPE_IDS, "fp64"])
@pytest.mark.parametrize("rows,dim,group_size", SHAPES, ids=SHAPE_IDS)
def test_gated_cpu_matches_reference(rows, dim, group_size, dtype, has_z, norm_before_gate):
    x, z, w = _inputs(rows, dim, dtype, has_z=has_z, z_stride=dim + 3)
    out = torch.ops.ssmscan.gated_rms_norm(x, z, w, 1e-5, group_size, norm_before_gate)
    assert out.dtype == dtype and out.shape == x.shape and out.is_contiguous()
    ref = gated_rms_norm_reference(x, z, w, 1e-5, group_size, norm_before_gate)
    assert_close_to_reference("out", out, ref, dtype)


@pytest.mark.parametrize("norm_before_gate", [False, True], ids=["gate-first", "norm-first"])
def test_gated_op_equals_the_module(norm_before_gate):
    """The op's CPU path is GatedRMSNorm's math, bit for bit."""
    x, z, w = _inputs((2, 3), 12, torch.bfloat16)
    norm = GatedRMSNorm(12, group_size=4, norm_before_gate=norm_before_gate)
    with torch.no_grad():
        norm.weight.copy_(w)
        want = norm(x, z)
    got = torch.ops.ssmscan.gated_rms_norm(x, z, w, norm.eps, 4, norm_before_gate)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize(
    "x_dtype,w_dtype",
    [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.bfloat16), (torch.float32,) * 2],
    ids=["fp32-in-bf16", "bf16", "fp32"],
)
def test_rms_norm_cpu_matches_reference_and_module(x_dtype, w_dtype):
    x, _, w = _inputs((3,), 10, x_dtype, has_z=False)
    w = w.to(w_dtype)
    out = torch.ops.ssmscan.rms_norm(x, w, 1e-5)
    assert out.dtype == w_dtype
    assert_close_to_reference("out", out, rms_norm_reference(x, w, 1e-5), w_dtype)
    norm = RMSNorm(10).to(w_dtype)
    with torch.no_grad():
        norm.weight.copy_(w)
        torch.testing.assert_close(out, norm(x.to(w_dtype)), rtol=0, atol=0)


RESIDUAL_DTYPES = [
    (torch.bfloat16, torch.float32, torch.bfloat16),
    (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float16, torch.float32),
    (torch.float32, torch.float32, torch.float32),
]
RESIDUAL_IDS = ["bf16-fp32-residual", "bf16", "fp16-fp32-weight", "fp32"]


def _residual_inputs(x_dtype, r_dtype, w_dtype, rows=(2, 3), dim=10):
    x, z, w = _inputs(rows, dim, x_dtype, z_stride=dim + 3)
    residual = (3.0 * z.float()).to(r_dtype)  # a strided residual
    return x, residual, w.to(w_dtype)


def _check_add_rms_norm(out, h, x, residual, w):
    r_out, r_h = add_rms_norm_reference(x, residual, w, 1e-5)
    assert out.dtype == w.dtype and h.dtype == r_h.dtype
    assert out.is_contiguous() and h.is_contiguous()
    assert_close_to_reference("h", h, r_h, h.dtype)
    assert_close_to_reference("out", out, r_out, w.dtype)


@pytest.mark.parametrize("x_dtype,r_dtype,w_dtype", RESIDUAL_DTYPES, ids=RESIDUAL_IDS)
def test_add_rms_norm_cpu_matches_reference_and_the_blocks(x_dtype, r_dtype, w_dtype):
    x, residual, w = _residual_inputs(x_dtype, r_dtype, w_dtype)
    out, h = torch.ops.ssmscan.add_rms_norm(x, residual, w, 1e-5)
    _check_add_rms_norm(out, h, x, residual, w)
    want_h = residual + x  # a block's output, then the next block's pre-norm
    torch.testing.assert_close(h, want_h, rtol=0, atol=0)
    torch.testing.assert_close(out, torch.ops.ssmscan.rms_norm(want_h, w, 1e-5), rtol=0, atol=0)


def test_bad_arguments_are_refused():
    x, z, w = _inputs((3,), 12, torch.float32)
    op = torch.ops.ssmscan.gated_rms_norm
    with pytest.raises(ValueError, match="group_size must divide dim = 12"):
        op(x, z, w, 1e-5, 5, False)
    with pytest.raises(ValueError, match="weight must have shape"):
        op(x, z, w[:6], 1e-5, 4, False)
    with pytest.raises(ValueError, match="z must have shape"):
        op(x, z[:2], w, 1e-5, 4, False)
    with pytest.raises(TypeError, match="x must have dtype"):
        op(x.int(), None, w, 1e-5, 4, False)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        torch.ops.ssmscan.rms_norm(x, w, -1.0)
    with pytest.raises(ValueError, match="residual must have shape"):
        torch.ops.ssmscan.add_rms_norm(x, x[:2], w, 1e-5)


@pytest.mark.parametrize("has_z", [True, False], ids=["z", "no-z"])
def test_fake_matches_real_shapes_and_strides(has_z):
    x, z, w = _inputs((2, 3), 12, torch.bfloat16, has_z=has_z, z_stride=20)
    real = torch.ops.ssmscan.gated_rms_norm(x, z, w, 1e-5, 4, False)
    real_plain = torch.ops.ssmscan.rms_norm(x.float(), w.bfloat16(), 1e-5)
    with FakeTensorMode() as mode:
        fx, fw = mode.from_tensor(x), mode.from_tensor(w)
        fz = mode.from_tensor(z) if z is not None else None
        fake = torch.ops.ssmscan.gated_rms_norm(fx, fz, fw, 1e-5, 4, False)
        fake_plain = torch.ops.ssmscan.rms_norm(fx.float(), fw.bfloat16(), 1e-5)
    x_, r_, w_ = _residual_inputs(torch.bfloat16, torch.float32, torch.bfloat16)
    real_add = torch.ops.ssmscan.add_rms_norm(x_, r_, w_, 1e-5)
    with FakeTensorMode() as mode:
        fake_add = torch.ops.ssmscan.add_rms_norm(
            *(mode.from_tensor(t) for t in (x_, r_, w_)), 1e-5
        )
    pairs = [(real, fake), (real_plain, fake_plain), *zip(real_add, fake_add)]
    for r, f in pairs:
        assert (f.shape, f.stride(), f.dtype) == (r.shape, r.stride(), r.dtype)


def test_opcheck():
    samples = [
        ((3,), 15, 5, True, False),
        ((2, 3), 12, 12, False, True),
        ((1,), 7, 7, True, True),
    ]
    for rows, dim, gs, has_z, nbg in samples:
        x, z, w = _inputs(rows, dim, torch.float32, has_z=has_z, z_stride=dim + 1)
        torch.library.opcheck(torch.ops.ssmscan.gated_rms_norm.default, (x, z, w, 1e-5, gs, nbg))
        torch.library.opcheck(torch.ops.ssmscan.rms_norm.default, (x, w.bfloat16(), 1e-5))
    for dtypes in RESIDUAL_DTYPES:
        args = _residual_inputs(*dtypes)
        torch.library.opcheck(torch.ops.ssmscan.add_rms_norm.default, (*args, 1e-5))


# ---- the Triton kernel under the interpreter ----


@pytest.mark.triton
@INTERPRET
@pytest.mark.parametrize("norm_before_gate", [False, True], ids=["gate-first", "norm-first"])
@pytest.mark.parametrize("has_z", [True, False], ids=["z", "no-z"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rows,dim,group_size", SHAPES[:3], ids=SHAPE_IDS[:3])
def test_gated_triton_interpreter(rows, dim, group_size, dtype, has_z, norm_before_gate):
    from ssmscan.ops.rms_norm import triton_fwd

    x, z, w = _inputs(rows, dim, dtype, has_z=has_z, z_stride=dim + 3)
    out = torch.full_like(x, float("nan"))
    triton_fwd.launch(x, z, w, 1e-5, group_size, norm_before_gate, False, out)
    ref = gated_rms_norm_reference(x, z, w, 1e-5, group_size, norm_before_gate)
    assert_close_to_reference("out", out, ref, dtype)


@pytest.mark.triton
@INTERPRET
@pytest.mark.parametrize("norm_before_gate", [False, True], ids=["gate-first", "norm-first"])
def test_gated_triton_interpreter_two_passes(monkeypatch, norm_before_gate):
    """Groups larger than one register block: the kernel's two-pass loop (block sizes shrunk so
    a 13-channel group takes four blocks)."""
    from ssmscan.ops.rms_norm import triton_fwd

    monkeypatch.setattr(triton_fwd, "MAX_ONE_PASS", 2)
    monkeypatch.setattr(triton_fwd, "BLOCK_TWO_PASS", 4)
    x, z, w = _inputs((3,), 26, torch.bfloat16, z_stride=30)
    out = torch.full_like(x, float("nan"))
    triton_fwd.launch(x, z, w, 1e-5, 13, norm_before_gate, False, out)
    ref = gated_rms_norm_reference(x, z, w, 1e-5, 13, norm_before_gate)
    assert_close_to_reference("out", out, ref, torch.bfloat16)


@pytest.mark.triton
@INTERPRET
@pytest.mark.parametrize(
    "x_dtype,w_dtype",
    [(torch.float32, torch.bfloat16), (torch.float16, torch.float16), (torch.float32,) * 2],
    ids=["fp32-in-bf16", "fp16", "fp32"],
)
def test_rms_norm_triton_interpreter(x_dtype, w_dtype):
    from ssmscan.ops.rms_norm import triton_fwd

    x, _, w = _inputs((5,), 11, x_dtype, has_z=False)
    w = w.to(w_dtype)
    out = torch.full(x.shape, float("nan"), dtype=w_dtype)
    triton_fwd.launch(x, None, w, 1e-5, 11, False, True, out)
    assert_close_to_reference("out", out, rms_norm_reference(x, w, 1e-5), w_dtype)


@pytest.mark.triton
@INTERPRET
@pytest.mark.parametrize("two_pass", [False, True], ids=["one-pass", "two-pass"])
@pytest.mark.parametrize("x_dtype,r_dtype,w_dtype", RESIDUAL_DTYPES, ids=RESIDUAL_IDS)
def test_add_rms_norm_triton_interpreter(monkeypatch, x_dtype, r_dtype, w_dtype, two_pass):
    from ssmscan.ops.rms_norm import triton_fwd

    if two_pass:
        monkeypatch.setattr(triton_fwd, "MAX_ONE_PASS", 2)
        monkeypatch.setattr(triton_fwd, "BLOCK_TWO_PASS", 4)
    x, residual, w = _residual_inputs(x_dtype, r_dtype, w_dtype)
    out = torch.full(x.shape, float("nan"), dtype=w_dtype)
    h = torch.full(x.shape, float("nan"), dtype=torch.promote_types(x_dtype, r_dtype))
    triton_fwd.launch(x, None, w, 1e-5, x.shape[-1], False, True, out, residual, h)
    _check_add_rms_norm(out, h, x, residual, w)


# ---- GPU ----


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("norm_before_gate", [False, True], ids=["gate-first", "norm-first"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "rows,dim,group_size",
    [((8, 33), 1536, 1536), ((5,), 5120, 640), ((3,), 8192, 8192), ((2,), 20000, 10000)],
    ids=["1536", "5120-g640", "8192", "20000-g10000-two-pass"],
)
def test_gated_gpu(rows, dim, group_size, dtype, norm_before_gate):
    x, z, w = _inputs(rows, dim, dtype, "cuda", z_stride=dim + 256)
    out = torch.ops.ssmscan.gated_rms_norm(x, z, w, 1e-5, group_size, norm_before_gate)
    ref = gated_rms_norm_reference(x, z, w, 1e-5, group_size, norm_before_gate)
    assert_close_to_reference("out", out, ref, dtype)
    nz = torch.ops.ssmscan.gated_rms_norm(x, None, w, 1e-5, group_size, norm_before_gate)
    ref = gated_rms_norm_reference(x, None, w, 1e-5, group_size, norm_before_gate)
    assert_close_to_reference("no z", nz, ref, dtype)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("dim", [768, 2560, 12345], ids=str)
def test_rms_norm_gpu(dim):
    x, _, w = _inputs((4, 7), dim, torch.float32, "cuda", has_z=False)
    for w_dtype in DTYPES:
        out = torch.ops.ssmscan.rms_norm(x, w.to(w_dtype), 1e-5)
        ref = rms_norm_reference(x, w.to(w_dtype), 1e-5)
        assert_close_to_reference(f"out {w_dtype}", out, ref, w_dtype)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("x_dtype,r_dtype,w_dtype", RESIDUAL_DTYPES, ids=RESIDUAL_IDS)
@pytest.mark.parametrize("dim", [768, 2560, 12345], ids=str)
def test_add_rms_norm_gpu(x_dtype, r_dtype, w_dtype, dim):
    x, residual, w = _residual_inputs(x_dtype, r_dtype, w_dtype, rows=(4, 7), dim=dim)
    x, residual, w = x.cuda(), residual.cuda(), w.cuda()
    out, h = torch.ops.ssmscan.add_rms_norm(x, residual, w, 1e-5)
    _check_add_rms_norm(out, h, x, residual, w)


@pytest.mark.slow
def test_fused_inference_kernels_compile_for_sm90():
    """Every fused inference kernel (norms, conv step, chunk convolution), each flag combination,
    through the real compiler for sm_90 (the interpreter accepts code the compiler rejects):
    ``compile_check.py`` in a process without TRITON_INTERPRET."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = os.path.join(os.path.dirname(__file__), "compile_check.py")
    res = subprocess.run(
        [sys.executable, script], env=env, capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert res.stdout.count(" ok") == 156, res.stdout
