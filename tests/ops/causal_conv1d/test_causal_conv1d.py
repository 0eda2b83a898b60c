"""ssmscan::causal_conv1d: the CPU path and the Triton kernel (interpreter, GPU) against the
float64 reference, with and without a state, chunks shorter than the kernel, several token and
channel blocks, strided inputs; the input state left alone; argument checks, fakes, opcheck."""

import os

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ssmscan.ops.causal_conv1d.op  # noqa: F401  (registers the op)
from ssmscan.ops.causal_conv1d.reference import causal_conv1d_reference
from ssmscan.testing import assert_close_to_reference

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
DTYPE_IDS = ["fp32", "bf16", "fp16"]
# (batch, L, dim, K): L above and below K, several token blocks (L > 32) and channel blocks
# (dim > 64), odd sizes, K 4 (Mamba's), 3 and 1, an empty chunk
SHAPES = [(2, 7, 11, 4), (3, 2, 5, 4), (2, 70, 67, 4), (1, 33, 130, 3), (1, 5, 3, 1), (2, 0, 5, 4)]
SHAPE_IDS = ["l7-d11", "l2-below-k", "l70-d67", "l33-d130-k3", "k1", "l0"]
INTERPRET = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)",
)
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _inputs(
    batch, L, dim, K, dtype, device="cpu", has_state=True, has_bias=True, seed=0, state_dtype=None
):
    """x (batch, L, dim) as a slice of a wider row (as the model's xBC), conv_state (float32 unless
    ``state_dtype``: the op rounds it to x's dtype), weight, bias."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, L, dim + 7, generator=g).to(device, dtype)[:, :, 3 : 3 + dim]
    state = torch.randn(batch, dim, K, generator=g).to(device, state_dtype or torch.float32)
    state = state if has_state else None
    weight = (0.5 * torch.randn(dim, K, generator=g)).to(device, dtype)
    bias = torch.randn(dim, generator=g).to(device, dtype) if has_bias else None
    return x, state, weight, bias


def _check(out, new_state, x, state, weight, bias, silu, dtype):
    r_out, r_state = causal_conv1d_reference(x, state, weight, bias, silu)
    assert out.dtype == x.dtype and new_state.dtype == x.dtype
    assert out.is_contiguous() or out.transpose(1, 2).is_contiguous()  # x's layout
    assert new_state.is_contiguous()
    assert out.shape == x.shape and new_state.shape == (x.shape[0], x.shape[2], weight.shape[1])
    assert_close_to_reference("out", out, r_out, dtype)
    torch.testing.assert_close(new_state, r_state, rtol=0, atol=0)  # a copy: exact


@pytest.mark.parametrize("silu", [True, False], ids=["silu", "linear"])
@pytest.mark.parametrize("has_state", [True, False], ids=["state", "no-state"])
@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64], ids=[*DTYPE_IDS, "fp64"])
@pytest.mark.parametrize("batch,L,dim,K", SHAPES, ids=SHAPE_IDS)
def test_cpu_matches_reference(batch, L, dim, K, dtype, has_state, silu):
    x, state, weight, bias = _inputs(batch, L, dim, K, dtype, has_state=has_state)
    before = None if state is None else state.clone()
    out, new_state = torch.ops.ssmscan.causal_conv1d(x, state, weight, bias, silu)
    _check(out, new_state, x, state, weight, bias, silu, dtype)
    if state is not None:
        torch.testing.assert_close(state, before, rtol=0, atol=0)


def test_chunks_continue_one_convolution():
    """Two chunks through the returned state give the one-chunk output and state."""
    x, state, weight, bias = _inputs(2, 9, 6, 4, torch.float64)
    whole, s_whole = torch.ops.ssmscan.causal_conv1d(x, state, weight, bias, True)
    a, s_a = torch.ops.ssmscan.causal_conv1d(x[:, :2], state, weight, bias, True)
    b, s_b = torch.ops.ssmscan.causal_conv1d(x[:, 2:], s_a, weight, bias, True)
    torch.testing.assert_close(torch.cat([a, b], dim=1), whole, rtol=0, atol=1e-14)
    torch.testing.assert_close(s_b, s_whole, rtol=0, atol=0)


def test_bad_arguments_are_refused():
    x, state, weight, bias = _inputs(2, 5, 6, 4, torch.float32)
    op = torch.ops.ssmscan.causal_conv1d
    with pytest.raises(ValueError, match="x must be"):
        op(x[0], state, weight, bias, True)
    with pytest.raises(ValueError, match="weight must be"):
        op(x, state, weight[:5], bias, True)
    with pytest.raises(ValueError, match="conv_state must have shape"):
        op(x, state[:, :, :3], weight, bias, True)
    with pytest.raises(ValueError, match="bias must have shape"):
        op(x, state, weight, bias[:5], True)
    with pytest.raises(TypeError, match="conv_state must have dtype"):
        op(x, state.int(), weight, bias, True)
    with pytest.raises(TypeError, match="x must have dtype"):
        op(x.int(), state, weight, bias, True)


def test_fake_matches_real_shapes_and_strides():
    x, state, weight, bias = _inputs(3, 6, 11, 4, torch.bfloat16)
    state = state.transpose(1, 2).contiguous().transpose(1, 2)  # a strided input state
    real = torch.ops.ssmscan.causal_conv1d(x, state, weight, bias, True)
    with FakeTensorMode() as mode:
        fake = torch.ops.ssmscan.causal_conv1d(
            *(mode.from_tensor(t) for t in (x, state, weight, bias)), True
        )
    for r, f in zip(real, fake):
        assert (f.shape, f.stride(), f.dtype) == (r.shape, r.stride(), r.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_out_follows_x_layout(dtype):
    """x the transpose of a channel-major (batch, dim, L) slice (Mamba-1's prefill): out is
    channel-major too, real and fake alike, with the token-major result's values (a one-token
    chunk too)."""
    g = torch.Generator().manual_seed(5)
    xz = torch.randn(3, 2 * 11, 6, generator=g, dtype=dtype)
    x = xz[:, :11].transpose(1, 2)  # (3, 6, 11), time stride 1, batch stride 2 * 11 * 6
    _, state, weight, bias = _inputs(3, 6, 11, 4, dtype)
    out, new_state = torch.ops.ssmscan.causal_conv1d(x, state, weight, bias, True)
    assert out.stride() == (66, 1, 6) and new_state.is_contiguous()
    want, want_state = torch.ops.ssmscan.causal_conv1d(x.contiguous(), state, weight, bias, True)
    assert want.is_contiguous()
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    torch.testing.assert_close(new_state, want_state, rtol=0, atol=0)
    with FakeTensorMode() as mode:
        fake, _ = torch.ops.ssmscan.causal_conv1d(
            *(mode.from_tensor(t) for t in (x, state, weight, bias)), True
        )
    assert fake.stride() == out.stride()
    one = xz[:, :11, :1].transpose(1, 2)  # a one-token chunk of it
    got = torch.ops.ssmscan.causal_conv1d(one, state, weight, bias, True)[0]
    want = torch.ops.ssmscan.causal_conv1d(one.contiguous(), state, weight, bias, True)[0]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_opcheck():
    for (batch, L, dim, K), has_state, silu in zip(
        SHAPES[:3], (True, False, True), (True, True, False)
    ):
        x, state, weight, bias = _inputs(batch, L, dim, K, torch.float32, has_state=has_state)
        torch.library.opcheck(
            torch.ops.ssmscan.causal_conv1d.default, (x, state, weight, bias, silu)
        )


@pytest.mark.triton
@INTERPRET
@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("has_state", [True, False], ids=["state", "no-state"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("batch,L,dim,K", SHAPES, ids=SHAPE_IDS)
def test_triton_interpreter(batch, L, dim, K, dtype, has_state, has_bias):
    from ssmscan.ops.causal_conv1d import triton_fwd

    # the state in x's dtype (the models' case): the interpreter truncates float32 -> 16-bit
    # casts where a GPU rounds to nearest even, so the rounded float32 state is checked on the GPU
    x, state, weight, bias = _inputs(
        batch, L, dim, K, dtype, has_state=has_state, has_bias=has_bias, state_dtype=dtype
    )
    if state is not None:
        state = state.transpose(1, 2).contiguous().transpose(1, 2)  # read through its strides
    silu = has_bias  # both activations, each with and without a state
    out = torch.full(x.shape, float("nan"), dtype=dtype)
    new_state = torch.full((batch, dim, K), float("nan"), dtype=dtype)
    triton_fwd.launch(x, state, weight, bias, silu, out, new_state)
    _check(out, new_state, x, state, weight, bias, silu, dtype)


@pytest.mark.triton
@INTERPRET
def test_triton_interpreter_channel_major_x():
    """x as the transpose of a (batch, dim, L) tensor (Mamba-1's layout): strided along L."""
    from ssmscan.ops.causal_conv1d import triton_fwd

    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 67, 40, generator=g).transpose(1, 2)
    state, weight, bias = torch.randn(2, 67, 4, generator=g), torch.randn(67, 4), torch.randn(67)
    for out in torch.empty(x.shape), torch.empty(2, 67, 40).transpose(1, 2):  # either layout
        out.fill_(float("nan"))
        new_state = torch.full((2, 67, 4), float("nan"))
        triton_fwd.launch(x, state, weight, bias, True, out, new_state)
        _check(out, new_state, x, state, weight, bias, True, torch.float32)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("has_state", [True, False], ids=["state", "no-state"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "batch,L,dim,K",
    [(8, 2048, 1792, 4), (1, 1000, 5376, 4), (3, 3, 1001, 3), (2, 77, 65, 4)],
    ids=["130m-b8", "2.7b", "below-k", "odd"],
)
def test_gpu(batch, L, dim, K, dtype, has_state):
    x, state, weight, bias = _inputs(batch, L, dim, K, dtype, "cuda", has_state=has_state)
    before = None if state is None else state.clone()
    out, new_state = torch.ops.ssmscan.causal_conv1d(x, state, weight, bias, True)
    _check(out, new_state, x, state, weight, bias, True, dtype)
    # channel-major x and out (Mamba-1's prefill), the same values
    xc = x.transpose(1, 2).contiguous().transpose(1, 2)
    out_c, state_c = torch.ops.ssmscan.causal_conv1d(xc, state, weight, bias, True)
    assert L == 1 or out_c.stride() == (dim * L, 1, L)
    torch.testing.assert_close(out_c, out, rtol=0, atol=0)
    torch.testing.assert_close(state_c, new_state, rtol=0, atol=0)
    if state is not None:
        torch.testing.assert_close(state, before, rtol=0, atol=0)
