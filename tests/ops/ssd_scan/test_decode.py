"""Mamba-2 decoding: a prefill through ``ssd_scan`` followed by k one-token
``selective_state_update`` steps (Mamba-2's layout, per-head parameters passed as the expanded
views transformers and mamba-ssm pass) equals one ``ssd_scan`` over all L + k tokens."""

from __future__ import annotations

import pytest
import torch

import ssmscan
from ssmscan.testing import assert_close_to_reference


def _step_args(kw, t, headdim, N):
    """One token's arguments of ``selective_state_update`` in Mamba-2's layout."""
    b, _, H, P = kw["x"].shape
    return dict(
        x=kw["x"][:, t],
        dt=kw["dt"][:, t, :, None].expand(b, H, P),
        A=kw["A"][:, None, None].expand(H, P, N),
        B=kw["B"][:, t],
        C=kw["C"][:, t],
        D=kw["D"][:, None].expand(H, P),
        z=kw["z"][:, t],
        dt_bias=kw["dt_bias"][:, None].expand(H, P),
        dt_softplus=True,
    )


@pytest.mark.parametrize("L,k", [(1, 1), (63, 3), (64, 2), (257, 4)], ids=lambda v: str(v))
def test_prefill_then_steps_equal_one_scan(L, k, ssd_inputs):
    kw = ssd_inputs(batch=2, L=L + k, nheads=4, headdim=8, ngroups=2, dstate=16,
                    D_shape="head", z=True, dt_bias=True, dt_softplus=True,
                    initial_states=True, seed=L)  # fmt: skip
    whole, final = ssmscan.ssd_scan(**kw, return_final_states=True)
    head = {n: (v[:, :L] if n in ("x", "dt", "B", "C", "z") else v) for n, v in kw.items()}
    out, state = ssmscan.ssd_scan(**head, return_final_states=True)
    steps = []
    for t in range(L, L + k):
        steps.append(ssmscan.selective_state_update(state, **_step_args(kw, t, 8, 16)))
    got = torch.cat([out, torch.stack(steps, dim=1)], dim=1)
    assert_close_to_reference("outputs", got, whole.double(), torch.float32)
    assert_close_to_reference("state after the steps", state, final.double(), torch.float32)
