"""The CPU kernel against the float64 reference: outputs, final states and every gradient."""

from __future__ import annotations

import itertools

import pytest
import torch

import ssmscan
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs

TENSOR_ARGS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")
DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.bfloat16}
# optional inputs: (D, z, delta_bias, softplus, initial_state); all on, all off, and two mixes
FLAG_SETS = {
    "all": (True, True, True, True, True),
    "none": (False, False, False, False, False),
    "zD": (True, True, False, False, False),
    "bias-sp-h0": (False, False, True, True, True),
}


def _cases():
    for L, N, groups, dt_name, flags in itertools.product(
        (1, 2, 63, 1000), (1, 16), (None, 1, 2), DTYPES, FLAG_SETS
    ):
        # keep the grid affordable: the long length runs every flag set in fp32 only
        if L == 1000 and dt_name != "fp32" and flags not in ("all", "none"):
            continue
        g = "3d" if groups is None else f"G{groups}"
        # the long length at 16 states with the slow tests (the float64 reference's slowest),
        # but fp32 with every option in the default run for the 3-D and one-group layouts
        long16 = (L, N) == (1000, 16)
        keep = groups != 2 and dt_name == "fp32" and flags == "all"
        slow = (pytest.mark.slow,) if long16 and not keep else ()
        yield pytest.param(
            L, N, groups, DTYPES[dt_name], flags, id=f"B2-D4-L{L}-N{N}-{g}-{dt_name}-{flags}",
            marks=slow,
        )  # fmt: skip


def run_against_reference(kw: dict, dtype: torch.dtype) -> None:
    """Compare ours with the float64 reference on the same inputs, forward and backward."""
    ours_in = {k: v for k, v in kw.items()}
    out, last = ssmscan.selective_scan(**ours_in, return_last_state=True)
    ref_in = {
        k: (v.detach().to(torch.float64).requires_grad_() if isinstance(v, torch.Tensor) else v)
        for k, v in kw.items()
    }
    ref_out, ref_last = ssmscan.selective_scan_reference(**ref_in, return_last_state=True)
    assert out.dtype == kw["u"].dtype and out.is_contiguous()
    assert_close_to_reference("out", out, ref_out, dtype)
    assert_close_to_reference("last_state", last, ref_last, dtype)

    gen = torch.Generator().manual_seed(1)
    # cotangents rounded to the result dtypes, so both sides differentiate the same function
    dout = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.dtype).double()
    dlast = torch.randn(last.shape, generator=gen, dtype=torch.float64).to(last.dtype).double()
    names = [k for k in TENSOR_ARGS if isinstance(kw.get(k), torch.Tensor)]
    grads = torch.autograd.grad(
        (out * dout.to(out.dtype)).sum() + (last * dlast.to(last.dtype)).sum(),
        [kw[k] for k in names],
    )
    ref_grads = torch.autograd.grad(
        (ref_out * dout).sum() + (ref_last * dlast).sum(), [ref_in[k] for k in names]
    )
    for name, g, rg in zip(names, grads, ref_grads):
        assert g.dtype == kw[name].dtype and g.shape == kw[name].shape, name
        assert_close_to_reference(f"d{name}", g, rg, dtype)


@pytest.mark.parametrize(("L", "N", "groups", "dtype", "flags"), list(_cases()))
def test_matches_reference(L, N, groups, dtype, flags):
    has_D, has_z, has_bias, softplus, has_h0 = FLAG_SETS[flags]
    dim = 4
    kw = make_selective_scan_inputs(
        2,
        dim,
        L,
        N,
        groups=groups,
        dtype=dtype,
        has_D=has_D,
        has_z=has_z,
        has_delta_bias=has_bias,
        delta_softplus=softplus,
        has_initial_state=has_h0,
        seed=L * 31 + N,
        requires_grad=True,
    )
    run_against_reference(kw, dtype)


@pytest.mark.parametrize("dim", [6, 13], ids=["D6", "D13"])
def test_many_rows_threads(dim):
    """More rows than threads and odd row counts: every row range boundary is exercised."""
    kw = make_selective_scan_inputs(
        3, dim, 77, 16, groups=None, seed=dim, requires_grad=True, has_initial_state=True
    )
    run_against_reference(kw, torch.float32)


def test_float16_inputs():
    kw = make_selective_scan_inputs(
        2,
        4,
        63,
        16,
        groups=2,
        dtype=torch.float16,
        seed=5,
        requires_grad=True,
        has_initial_state=True,
    )
    run_against_reference(kw, torch.float16)


def test_gradcheck_float64():
    kw = make_selective_scan_inputs(
        1,
        2,
        9,
        3,
        groups=2,
        dtype=torch.float64,
        seed=3,
        has_initial_state=True,
        requires_grad=True,
    )
    names = [k for k in TENSOR_ARGS if isinstance(kw[k], torch.Tensor)]

    def f(*tensors):
        args = dict(kw, **dict(zip(names, tensors)))
        return ssmscan.selective_scan(**args, return_last_state=True)

    assert torch.autograd.gradcheck(f, tuple(kw[k] for k in names))


def test_chunked_equals_whole():
    """L1 then L2 with initial_state = the first run's last state equals one run over L1+L2."""
    kw = make_selective_scan_inputs(2, 8, 700, 16, groups=2, seed=11, has_initial_state=True)
    out, last = ssmscan.selective_scan(**kw, return_last_state=True)
    L1 = 301
    first = {k: (v[..., :L1] if k in ("u", "delta", "z", "B", "C") else v) for k, v in kw.items()}
    second = {k: (v[..., L1:] if k in ("u", "delta", "z", "B", "C") else v) for k, v in kw.items()}
    out1, last1 = ssmscan.selective_scan(**first, return_last_state=True)
    second["initial_state"] = last1
    out2, last2 = ssmscan.selective_scan(**second, return_last_state=True)
    torch.testing.assert_close(torch.cat([out1, out2], -1), out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(last2, last, rtol=1e-5, atol=1e-5)


def test_length_zero_gives_empty_output():
    kw = make_selective_scan_inputs(2, 4, 0, 16, has_initial_state=True)
    out, last = ssmscan.selective_scan(**kw, return_last_state=True)
    assert out.shape == (2, 4, 0)
    torch.testing.assert_close(last, kw["initial_state"])


def test_nan_propagates():
    kw = make_selective_scan_inputs(1, 4, 20, 16)
    kw["u"][0, 1, 5] = float("nan")
    out = ssmscan.selective_scan(**kw)
    assert torch.isnan(out[0, 1, 5:]).all()  # the state carries it forward
    assert not torch.isnan(out[0, 0]).any() and not torch.isnan(out[0, 1, :5]).any()


def test_non_contiguous_inputs():
    kw = make_selective_scan_inputs(2, 4, 33, 16, seed=9)
    nc = {
        k: (
            v.transpose(-1, -2).contiguous().transpose(-1, -2)
            if isinstance(v, torch.Tensor) and v.dim() >= 2
            else v
        )
        for k, v in kw.items()
    }
    assert not nc["u"].is_contiguous()
    torch.testing.assert_close(ssmscan.selective_scan(**nc), ssmscan.selective_scan(**kw))


def test_impl_reference_and_cpu_agree():
    kw = make_selective_scan_inputs(2, 4, 50, 16, seed=2)
    torch.testing.assert_close(
        ssmscan.selective_scan(**kw, impl="cpu"),
        ssmscan.selective_scan(**kw, impl="reference"),
        rtol=1e-5,
        atol=1e-5,
    )
