"""Input factory of the ssd_scan tests: realistic Mamba-2 inputs, never zeros."""

from __future__ import annotations

import math

import pytest
import torch

OPTIONAL = ("D", "z", "dt_bias", "initial_states", "seq_idx")


def make_ssd_inputs(
    batch=2,
    L=37,
    nheads=4,
    headdim=4,
    ngroups=2,
    dstate=8,
    dtype=torch.float32,
    D_shape="head",  # "head" (nheads,), "channel" (nheads, headdim) or None
    z=False,
    dt_bias=False,
    dt_softplus=False,
    initial_states=False,
    seq_idx=False,
    seed=0,
):
    """Keyword arguments of ``ssmscan.ssd_scan`` (without options other than dt_softplus).

    dt lands in [1e-3, 0.1] after bias and softplus (Mamba-2's range); without softplus a few
    raw steps are negative, so the default clamp at 0 is exercised. Parameters (A, D, dt_bias,
    initial_states) are in the state dtype; activations in ``dtype``. ``seq_idx`` packs 3 or 4
    sequences per row (nondecreasing, first id 0 in row 0 and 1 in row 1, so row 1 ignores the
    initial state)."""
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    pdt = f64 if dtype == f64 else torch.float32
    lo, hi = math.log(1e-3), math.log(1e-1)
    target = torch.exp(torch.rand(batch, L, nheads, generator=g, dtype=f64) * (hi - lo) + lo)
    bias = torch.exp(torch.rand(nheads, generator=g, dtype=f64) * (hi - lo) + lo)

    def inv_softplus(y):
        return y + torch.log(-torch.expm1(-y))

    if dt_softplus:
        dt = inv_softplus(target) - (inv_softplus(bias) if dt_bias else 0.0)
        bias_param = inv_softplus(bias)
    else:
        dt = target - 0.01 - (bias if dt_bias else 0.0)
        bias_param = bias

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=f64)

    kw = {
        "x": randn(batch, L, nheads, headdim).to(dtype),
        "dt": dt.to(dtype),
        "A": -torch.exp(0.5 * randn(nheads)).to(pdt),
        "B": randn(batch, L, ngroups, dstate).to(dtype),
        "C": randn(batch, L, ngroups, dstate).to(dtype),
        "dt_softplus": dt_softplus,
    }
    if D_shape is not None:
        kw["D"] = randn(*((nheads,) if D_shape == "head" else (nheads, headdim))).to(pdt)
    if z:
        kw["z"] = randn(batch, L, nheads, headdim).to(dtype)
    if dt_bias:
        kw["dt_bias"] = bias_param.to(pdt)
    if initial_states:
        kw["initial_states"] = (0.5 * randn(batch, nheads, headdim, dstate)).to(pdt)
    if seq_idx:
        cuts = torch.sort(torch.randint(1, max(L, 2), (batch, 3), generator=g), dim=1).values
        steps = (torch.arange(L)[None, :, None] >= cuts[:, None, :]).sum(-1)
        kw["seq_idx"] = (steps + torch.arange(batch)[:, None].clamp(max=1)).to(torch.int32)
    return kw


@pytest.fixture
def ssd_inputs():
    return make_ssd_inputs
