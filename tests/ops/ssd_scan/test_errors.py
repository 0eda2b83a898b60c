"""Bad input to ssd_scan gets a clear error naming the argument, what it got and what was
expected; GPU tensors and impl='triton' get NotImplementedError naming the alternatives."""

from __future__ import annotations

import pytest
import torch

import ssmscan


def _kw(ssd_inputs):
    return ssd_inputs(L=10, D_shape="head", z=True, dt_bias=True, initial_states=True,
                      seq_idx=True)  # fmt: skip


CASES = {
    "x-3d": (lambda kw: kw.update(x=kw["x"][0]), ValueError, r"x must be 4-D"),
    "x-int": (lambda kw: kw.update(x=kw["x"].to(torch.int32)), TypeError, r"x must have dtype"),
    "dt-shape": (lambda kw: kw.update(dt=kw["dt"][:, :5]), ValueError, r"dt must have shape"),
    "dt-fp16": (lambda kw: kw.update(dt=kw["dt"].half()), TypeError, r"dt must have dtype"),
    "A-shape": (lambda kw: kw.update(A=kw["A"][:2]), ValueError, r"A must have shape \(4,\)"),
    "B-groups": (
        lambda kw: kw.update(
            B=kw["B"][:, :, :1].expand(2, 10, 3, 8), C=kw["C"][:, :, :1].expand(2, 10, 3, 8)
        ),
        ValueError,
        r"divisible by ngroups=3",
    ),
    "C-shape": (lambda kw: kw.update(C=kw["C"][:, :, :, :4]), ValueError, r"C must have shape"),
    "D-shape": (lambda kw: kw.update(D=torch.ones(4, 3)), ValueError, r"D must have shape"),
    "z-dtype": (lambda kw: kw.update(z=kw["z"].double()), TypeError, r"z must have dtype"),
    "dt_bias-shape": (lambda kw: kw.update(dt_bias=torch.ones(5)), ValueError, r"dt_bias must"),
    "initial_states-shape": (
        lambda kw: kw.update(initial_states=kw["initial_states"][:, :, :, :3]),
        ValueError,
        r"initial_states must have shape",
    ),
    "seq_idx-float": (
        lambda kw: kw.update(seq_idx=kw["seq_idx"].float()),
        TypeError,
        r"seq_idx must have dtype",
    ),
    "seq_idx-shape": (
        lambda kw: kw.update(seq_idx=kw["seq_idx"][:, :3]),
        ValueError,
        r"seq_idx must have shape",
    ),
    "A-list": (lambda kw: kw.update(A=[1.0] * 4), TypeError, r"A must be a torch.Tensor"),
    "A-meta": (lambda kw: kw.update(A=kw["A"].to("meta")), ValueError, r"A is on device meta"),
    "chunk_size-0": (lambda kw: kw.update(chunk_size=0), ValueError, r"chunk_size must be"),
    "dt_limit-reversed": (lambda kw: kw.update(dt_limit=(1.0, 0.1)), ValueError, r"dt_limit"),
    "impl-unknown": (lambda kw: kw.update(impl="cuda"), ValueError, r"impl must be one of"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_argument_is_named(case, ssd_inputs):
    kw = _kw(ssd_inputs)
    mutate, exc, pattern = CASES[case]
    mutate(kw)
    with pytest.raises(exc, match=pattern):
        ssmscan.ssd_scan(**kw)


def test_triton_impl_not_implemented(ssd_inputs):
    with pytest.raises(NotImplementedError, match="impl='reference'"):
        ssmscan.ssd_scan(**_kw(ssd_inputs), impl="triton")


def test_non_cpu_tensors_not_implemented(ssd_inputs):
    """Tensors on a device with no kernel (meta) get NotImplementedError, never a silent slow
    path; impl='reference' is named as the alternative."""
    kw = {
        k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in _kw(ssd_inputs).items()
    }
    with pytest.raises(NotImplementedError, match="impl='reference'"):
        ssmscan.ssd_scan(**kw)
