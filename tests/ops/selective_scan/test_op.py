"""Op-level checks: opcheck, fake vs real shapes and strides, no aliasing."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ssmscan
from ssmscan.testing import make_selective_scan_inputs

FWD = torch.ops.ssmscan.selective_scan_fwd.default
BWD = torch.ops.ssmscan.selective_scan_bwd.default
ORDER = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state", "delta_softplus")


def _non_contiguous(t):
    """Same values, transposed storage (strides no longer row-major)."""
    if not isinstance(t, torch.Tensor) or t.dim() < 2:
        return t
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


SAMPLES = {
    "L1-N1-3d": dict(batch=1, dim=2, L=1, N=1),
    "L7-N4-G2-h0": dict(batch=2, dim=4, L=7, N=4, groups=2, has_initial_state=True),
    "L63-N16-noopt": dict(
        batch=1,
        dim=3,
        L=63,
        N=16,
        has_D=False,
        has_z=False,
        has_delta_bias=False,
        delta_softplus=False,
    ),
    "L300-N2-G1-sp": dict(batch=2, dim=2, L=300, N=2, groups=1, has_initial_state=True),
    "L5-N3-noncontig": dict(batch=2, dim=3, L=5, N=3, noncontig=True),
    "L257-N2-noncontig-G3": dict(
        batch=1, dim=6, L=257, N=2, groups=3, noncontig=True, has_initial_state=True
    ),
    "L0-N2": dict(batch=1, dim=2, L=0, N=2, has_initial_state=True),
}


def sample_args(name, requires_grad=False):
    spec = dict(SAMPLES[name])
    noncontig = spec.pop("noncontig", False)
    kw = make_selective_scan_inputs(**spec, seed=len(name), requires_grad=False)
    if noncontig:
        kw = {k: _non_contiguous(v) for k, v in kw.items()}
    if requires_grad:
        kw = {k: v.requires_grad_() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    return tuple(kw[k] for k in ORDER)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_opcheck_forward(name):
    torch.library.opcheck(FWD, sample_args(name, requires_grad=True))


@pytest.mark.parametrize("name", list(SAMPLES))
def test_opcheck_backward(name):
    args = sample_args(name)
    out, last, ckpt = FWD(*args)
    g = torch.Generator().manual_seed(0)
    dout = (
        _non_contiguous(torch.randn(out.shape, generator=g))
        if "noncontig" in name
        else torch.randn(out.shape, generator=g)
    )
    dlast = torch.randn(last.shape, generator=g)
    u, delta, A, B, C, D, z, bias, h0, sp = args
    torch.library.opcheck(BWD, (dout, dlast, u, delta, A, B, C, D, z, bias, h0, ckpt, sp))
    # and without a last-state cotangent
    torch.library.opcheck(BWD, (dout, None, u, delta, A, B, C, D, z, bias, h0, ckpt, sp))


def _fake_outputs(op, args):
    mode = FakeTensorMode()
    with mode:
        fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        return op(*fake_args)


def _flatten(outs):
    flat = []
    for o in outs:
        flat.extend(o if isinstance(o, list) else [o])
    return flat


@pytest.mark.parametrize("name", list(SAMPLES))
def test_fake_matches_real_shapes_and_strides(name):
    args = sample_args(name)
    real = FWD(*args)
    fake = _fake_outputs(FWD, args)
    for r, f in zip(real, fake, strict=True):
        assert (r.shape, r.stride(), r.dtype) == (f.shape, f.stride(), f.dtype)
    u, delta, A, B, C, D, z, bias, h0, sp = args
    bwd_args = (
        torch.randn(real[0].shape),
        torch.randn(real[1].shape),
        u,
        delta,
        A,
        B,
        C,
        D,
        z,
        bias,
        h0,
        real[2],
        sp,
    )
    real_b, fake_b = _flatten(BWD(*bwd_args)), _flatten(_fake_outputs(BWD, bwd_args))
    assert len(real_b) == len(fake_b)
    for r, f in zip(real_b, fake_b):
        assert (r.shape, r.stride(), r.dtype) == (f.shape, f.stride(), f.dtype)


@pytest.mark.parametrize("name", ["L7-N4-G2-h0", "L5-N3-noncontig"])
def test_outputs_alias_nothing(name):
    args = sample_args(name)
    outs = _flatten(FWD(*args))
    u, delta, A, B, C, D, z, bias, h0, sp = args
    outs_b = _flatten(
        BWD(torch.randn(outs[0].shape), None, u, delta, A, B, C, D, z, bias, h0, outs[2], sp)
    )
    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    everything = outs + outs_b
    storages = [t.untyped_storage().data_ptr() for t in everything if t.numel()]
    assert len(storages) == len(set(storages)), "two outputs share storage"
    for t in everything:
        for i in inputs:
            if t.numel() and i.numel():
                assert t.untyped_storage().data_ptr() != i.untyped_storage().data_ptr()


def test_forward_does_not_keep_the_state_tensor():
    """What autograd saves is the inputs plus checkpoints of size ceil(L/256)*N per row, not L*N."""
    kw = make_selective_scan_inputs(1, 4, 1000, 16, requires_grad=True)
    _, _, ckpt = FWD(*(kw[k] for k in ORDER))
    assert ckpt.shape == (1, 4, 5, 16)


def test_checkpoints_hold_the_states_before_each_chunk():
    kw = make_selective_scan_inputs(1, 2, 600, 3, has_initial_state=True, seed=4)
    _, _, ckpt = FWD(*(kw[k] for k in ORDER))
    for c, t in enumerate((0, 256, 512, 600)):
        if t == 0:
            expected = kw["initial_state"]
        else:
            first = {
                k: (v[..., :t] if k in ("u", "delta", "z", "B", "C") else v) for k, v in kw.items()
            }
            expected = ssmscan.selective_scan(**first, return_last_state=True)[1]
        torch.testing.assert_close(ckpt[:, :, c], expected, rtol=1e-5, atol=1e-6)
