"""ssmscan::conv1d_step: the CPU path and the Triton kernel (interpreter, GPU) against the float64
reference, the input state left alone, argument checks, fakes, opcheck."""

import os

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ssmscan.ops.conv1d_step.op  # noqa: F401  (registers the op)
from ssmscan.ops.conv1d_step.reference import conv1d_step_reference
from ssmscan.testing import assert_close_to_reference

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
DTYPE_IDS = ["fp32", "bf16", "fp16"]
# (batch, dim, K): odd channel counts, one and several channel blocks, K 4 (Mamba's), 3 and 1
SHAPES = [(3, 11, 4), (2, 130, 3), (1, 5, 1)]
SHAPE_IDS = ["b3-d11-k4", "b2-d130-k3", "b1-d5-k1"]
INTERPRET = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)",
)
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _inputs(batch, dim, K, dtype, device="cpu", has_bias=True, seed=0):
    """x (batch, dim) as a slice of a wider row (as the model's xBC), conv_state, weight, bias."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, dim + 7, generator=g).to(device, dtype)[:, 3 : 3 + dim]
    state = torch.randn(batch, dim, K, generator=g).to(device, dtype)
    weight = (0.5 * torch.randn(dim, K, generator=g)).to(device, dtype)
    bias = torch.randn(dim, generator=g).to(device, dtype) if has_bias else None
    return x, state, weight, bias


def _check(out, new_state, x, state, weight, bias, silu, dtype):
    r_out, r_state = conv1d_step_reference(x, state, weight, bias, silu)
    assert out.dtype == x.dtype and new_state.dtype == state.dtype
    assert out.is_contiguous() and new_state.is_contiguous()
    assert_close_to_reference("out", out, r_out, dtype)
    torch.testing.assert_close(new_state, r_state, rtol=0, atol=0)  # a shift: exact


@pytest.mark.parametrize("silu", [True, False], ids=["silu", "linear"])
@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64], ids=[*DTYPE_IDS, "fp64"])
@pytest.mark.parametrize("batch,dim,K", SHAPES, ids=SHAPE_IDS)
def test_cpu_matches_reference(batch, dim, K, dtype, has_bias, silu):
    x, state, weight, bias = _inputs(batch, dim, K, dtype, has_bias=has_bias)
    before = state.clone()
    out, new_state = torch.ops.ssmscan.conv1d_step(x, state, weight, bias, silu)
    _check(out, new_state, x, state, weight, bias, silu, dtype)
    torch.testing.assert_close(state, before, rtol=0, atol=0)


def test_bad_arguments_are_refused():
    x, state, weight, bias = _inputs(2, 6, 4, torch.float32)
    op = torch.ops.ssmscan.conv1d_step
    with pytest.raises(ValueError, match="conv_state must be"):
        op(x, state[0], weight, bias, True)
    with pytest.raises(ValueError, match="x must have shape"):
        op(x[:, :5], state, weight, bias, True)
    with pytest.raises(ValueError, match="weight must have shape"):
        op(x, state, weight[:, :3], bias, True)
    with pytest.raises(ValueError, match="bias must have shape"):
        op(x, state, weight, bias[:5], True)
    with pytest.raises(TypeError, match="conv_state must have dtype"):
        op(x, state.int(), weight, bias, True)


def test_fake_matches_real_shapes_and_strides():
    x, state, weight, bias = _inputs(3, 11, 4, torch.bfloat16)
    state = state.transpose(1, 2).contiguous().transpose(1, 2)  # a strided input state
    real = torch.ops.ssmscan.conv1d_step(x, state, weight, bias, True)
    with FakeTensorMode() as mode:
        fake = torch.ops.ssmscan.conv1d_step(
            *(mode.from_tensor(t) for t in (x, state, weight, bias)), True
        )
    for r, f in zip(real, fake):
        assert (f.shape, f.stride(), f.dtype) == (r.shape, r.stride(), r.dtype)


def test_opcheck():
    for (batch, dim, K), has_bias, silu in zip(SHAPES, (True, False, True), (True, True, False)):
        x, state, weight, bias = _inputs(batch, dim, K, torch.float32, has_bias=has_bias)
        torch.library.opcheck(torch.ops.ssmscan.conv1d_step.default, (x, state, weight, bias, silu))


@pytest.mark.triton
@INTERPRET
@pytest.mark.parametrize("silu", [True, False], ids=["silu", "linear"])
@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("batch,dim,K", SHAPES, ids=SHAPE_IDS)
def test_triton_interpreter(batch, dim, K, dtype, has_bias, silu):
    from ssmscan.ops.conv1d_step import triton_fwd

    x, state, weight, bias = _inputs(batch, dim, K, dtype, has_bias=has_bias)
    state = state.transpose(1, 2).contiguous().transpose(1, 2)  # read through its strides
    out = torch.full_like(x, float("nan"), memory_format=torch.contiguous_format)
    new_state = torch.full(state.shape, float("nan"), dtype=dtype)
    triton_fwd.launch(x, state, weight, bias, silu, out, new_state)
    _check(out, new_state, x, state, weight, bias, silu, dtype)


def _check_in_place(x, state, weight, bias, silu, dtype):
    """conv1d_step_ against the reference: the returned output, the state overwritten."""
    from ssmscan.ops.conv1d_step.api import conv1d_step_

    before, ptr = state.clone(), state.data_ptr()
    r_out, r_state = conv1d_step_reference(x, before, weight, bias, silu)
    out = conv1d_step_(x, state, weight, bias, silu)
    assert state.data_ptr() == ptr and out.dtype == x.dtype
    assert_close_to_reference("out", out, r_out, dtype)
    torch.testing.assert_close(state, r_state, rtol=0, atol=0)


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_in_place_cpu(dtype, strided):
    """Off CUDA (and for a strided state) the functional op runs and its state is copied back."""
    x, state, weight, bias = _inputs(3, 11, 4, dtype)
    if strided:
        state = state.transpose(1, 2).contiguous().transpose(1, 2)
    _check_in_place(x, state, weight, bias, True, dtype)


def test_in_place_refuses_a_strided_state_in_the_kernel_launch():
    from ssmscan.ops.conv1d_step import triton_fwd

    x, state, weight, bias = _inputs(2, 6, 4, torch.float32)
    state = state.transpose(1, 2).contiguous().transpose(1, 2)
    with pytest.raises(ValueError, match="contiguous conv_state"):
        triton_fwd.launch(x, state, weight, bias, True, torch.empty_like(x), state)


@pytest.mark.triton
@INTERPRET
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("batch,dim,K", SHAPES, ids=SHAPE_IDS)
def test_triton_interpreter_in_place(batch, dim, K, dtype):
    """The kernel writing the next state over the one it reads (IN_PLACE)."""
    from ssmscan.ops.conv1d_step import triton_fwd

    x, state, weight, bias = _inputs(batch, dim, K, dtype)
    before = state.clone()
    out = torch.full_like(x, float("nan"), memory_format=torch.contiguous_format)
    triton_fwd.launch(x, state, weight, bias, True, out, state)
    _check(out, state, x, before, weight, bias, True, dtype)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("in_place", [False, True], ids=["functional", "in-place"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "batch,dim,K", [(1, 1792, 4), (64, 5376, 4), (3, 1001, 3)], ids=["130m", "2.7b-b64", "odd"]
)
def test_gpu(batch, dim, K, dtype, in_place):
    """The op (the input state left alone) and ``conv1d_step_`` (the kernel writing the state
    it reads) on CUDA."""
    x, state, weight, bias = _inputs(batch, dim, K, dtype, "cuda")
    if in_place:
        _check_in_place(x, state, weight, bias, True, dtype)
        return
    before = state.clone()
    out, new_state = torch.ops.ssmscan.conv1d_step(x, state, weight, bias, True)
    _check(out, new_state, x, state, weight, bias, True, dtype)
    torch.testing.assert_close(state, before, rtol=0, atol=0)
