"""Bad arguments to ``ssmscan.selective_state_update`` get a ValueError / TypeError that names the
argument (the message starts with its name); the views mamba-ssm and transformers legitimately pass
keep working."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssmscan.ops.selective_state_update.api import selective_state_update

BATCH, DIM, N = 2, 4, 3
NHEADS, HEADDIM, NGROUPS = 4, 3, 2


def _mamba1(**over):
    g = torch.Generator().manual_seed(0)
    kw = dict(
        state=torch.randn(BATCH, DIM, N, generator=g),
        x=torch.randn(BATCH, DIM, generator=g),
        dt=torch.rand(BATCH, DIM, generator=g),
        A=-torch.rand(DIM, N, generator=g),
        B=torch.randn(BATCH, N, generator=g),
        C=torch.randn(BATCH, N, generator=g),
        D=torch.randn(DIM, generator=g),
        z=torch.randn(BATCH, DIM, generator=g),
        dt_bias=torch.rand(DIM, generator=g),
        dt_softplus=True,
    )
    kw.update(over)
    return kw


def _mamba2(**over):
    g = torch.Generator().manual_seed(1)
    hp = (NHEADS, HEADDIM)
    kw = dict(
        state=torch.randn(BATCH, *hp, N, generator=g),
        x=torch.randn(BATCH, *hp, generator=g),
        dt=torch.rand(BATCH, NHEADS, generator=g)[..., None].expand(-1, -1, HEADDIM),
        A=(-torch.rand(NHEADS, generator=g))[:, None, None].expand(-1, HEADDIM, N),
        B=torch.randn(BATCH, NGROUPS, N, generator=g),
        C=torch.randn(BATCH, NGROUPS, N, generator=g),
        D=torch.randn(NHEADS, generator=g)[:, None].expand(-1, HEADDIM),
        z=torch.randn(BATCH, *hp, generator=g),
        dt_bias=torch.rand(NHEADS, generator=g)[:, None].expand(-1, HEADDIM),
        dt_softplus=True,
    )
    kw.update(over)
    return kw


def _leaf_state(kw):
    return kw["state"].clone().requires_grad_()


def _B_on_meta(kw):
    return kw["B"].to("meta")


BAD = [
    # Mamba-1 layout: broadcastable shapes are refused
    pytest.param(_mamba1, dict(A=-torch.rand(1, N)), ValueError, "A", id="m1-A-1xN"),
    pytest.param(_mamba1, dict(A=-torch.rand(DIM, 1)), ValueError, "A", id="m1-A-dimx1"),
    pytest.param(_mamba1, dict(D=torch.randn(1)), ValueError, "D", id="m1-D-1"),
    pytest.param(_mamba1, dict(dt_bias=torch.rand(1)), ValueError, "dt_bias", id="m1-dt_bias-1"),
    pytest.param(_mamba1, dict(z=torch.randn(1, DIM)), ValueError, "z", id="m1-z-1xdim"),
    pytest.param(
        _mamba1, dict(B=torch.randn(1, N), C=torch.randn(1, N)), ValueError, "B", id="m1-BC-batch1"
    ),
    pytest.param(_mamba1, dict(C=torch.randn(1, N)), ValueError, "C", id="m1-C-batch1"),
    pytest.param(_mamba1, dict(dt=torch.rand(BATCH, 1)), ValueError, "dt", id="m1-dt-bx1"),
    # dtypes
    pytest.param(
        _mamba1,
        dict(state=torch.zeros(BATCH, DIM, N, dtype=torch.int64)),
        TypeError,
        "state",
        id="m1-state-int64",
    ),
    pytest.param(
        _mamba1,
        dict(x=torch.ones(BATCH, DIM, dtype=torch.int64)),
        TypeError,
        "x",
        id="m1-x-int64",
    ),
    pytest.param(
        _mamba1,
        dict(state=torch.zeros(BATCH, DIM, N, dtype=torch.complex64)),
        TypeError,
        "state",
        id="m1-state-complex64",
    ),
    pytest.param(
        _mamba1,
        dict(state=torch.zeros(BATCH, DIM, N, dtype=torch.float64)),
        TypeError,
        "state",
        id="m1-state-f64-x-f32",
    ),
    pytest.param(
        _mamba1,
        dict(dt=torch.rand(BATCH, DIM, dtype=torch.float64)),
        TypeError,
        "dt",
        id="m1-dt-f64-x-f32",
    ),
    pytest.param(
        _mamba1,
        dict(A=-torch.rand(DIM, N, dtype=torch.float64)),
        TypeError,
        "A",
        id="m1-A-f64-x-f32",
    ),
    # sizes that disagree
    pytest.param(
        _mamba1,
        dict(B=torch.randn(BATCH, N + 1), C=torch.randn(BATCH, N + 1)),
        ValueError,
        "B",
        id="m1-BC-wrong-N",
    ),
    pytest.param(_mamba1, dict(A=-torch.rand(DIM, N + 1)), ValueError, "A", id="m1-A-wrong-N"),
    pytest.param(
        _mamba1,
        dict(x=torch.randn(BATCH + 1, DIM), dt=torch.rand(BATCH + 1, DIM)),
        ValueError,
        "state",
        id="m1-x-wrong-batch",
    ),
    pytest.param(
        _mamba1,
        dict(B=torch.randn(BATCH, 3, N), C=torch.randn(BATCH, 3, N)),
        ValueError,
        "B",
        id="m1-groups-3-dim-4",
    ),
    pytest.param(_mamba1, dict(x=torch.randn(BATCH, DIM, 1)), ValueError, "x", id="m1-x-3d"),
    # not tensors
    pytest.param(
        _mamba1,
        dict(state=np.zeros((BATCH, DIM, N), np.float32)),
        TypeError,
        "state",
        id="m1-state-numpy",
    ),
    pytest.param(_mamba1, dict(A=None), TypeError, "A", id="m1-A-None"),
    # the in-place write
    pytest.param(_mamba1, dict(state=_leaf_state), ValueError, "state", id="m1-state-grad-leaf"),
    pytest.param(
        _mamba1,
        dict(state=torch.randn(1, DIM, N).expand(BATCH, -1, -1)),
        ValueError,
        "state",
        id="m1-state-expanded",
    ),
    # devices
    pytest.param(_mamba1, dict(B=_B_on_meta), ValueError, "B", id="m1-B-other-device"),
    # Mamba-2 layout
    pytest.param(
        _mamba2, dict(x=torch.randn(BATCH, NHEADS * HEADDIM)), ValueError, "x", id="m2-x-2d"
    ),
    pytest.param(_mamba2, dict(A=-torch.rand(NHEADS)), ValueError, "A", id="m2-A-per-head"),
    pytest.param(_mamba2, dict(A=-torch.rand(NHEADS, 1, 1)), ValueError, "A", id="m2-A-hx1x1"),
    pytest.param(_mamba2, dict(D=torch.randn(NHEADS)), ValueError, "D", id="m2-D-per-head"),
    pytest.param(
        _mamba2, dict(dt_bias=torch.rand(NHEADS, 1)), ValueError, "dt_bias", id="m2-dt_bias-hx1"
    ),
    pytest.param(
        _mamba2, dict(dt=torch.rand(BATCH, NHEADS, 1)), ValueError, "dt", id="m2-dt-bxhx1"
    ),
    pytest.param(_mamba2, dict(z=torch.randn(BATCH, NHEADS, 1)), ValueError, "z", id="m2-z-bxhx1"),
    pytest.param(_mamba2, dict(B=torch.randn(BATCH, N)), ValueError, "B", id="m2-B-2d"),
    pytest.param(
        _mamba2,
        dict(B=torch.randn(BATCH, 3, N), C=torch.randn(BATCH, 3, N)),
        ValueError,
        "B",
        id="m2-groups-3-nheads-4",
    ),
    pytest.param(
        _mamba2, dict(C=torch.randn(BATCH, NGROUPS, N + 1)), ValueError, "C", id="m2-C-wrong-N"
    ),
    pytest.param(
        _mamba2,
        dict(state=torch.randn(BATCH + 2, NHEADS, HEADDIM, N)),
        ValueError,
        "state",
        id="m2-state-more-rows-no-indices",
    ),
    pytest.param(
        _mamba2,
        dict(state_batch_indices=torch.tensor([0.0, 1.0])),
        TypeError,
        "state_batch_indices",
        id="m2-indices-float",
    ),
    pytest.param(
        _mamba2,
        dict(state_batch_indices=torch.tensor([0, 1, 1])),
        ValueError,
        "state_batch_indices",
        id="m2-indices-wrong-length",
    ),
    pytest.param(
        _mamba2,
        dict(state_batch_indices=torch.tensor([0, BATCH])),
        ValueError,
        "state_batch_indices",
        id="m2-indices-past-last-row",
    ),
    pytest.param(
        _mamba2,
        dict(state_batch_indices=torch.tensor([1, 1])),
        ValueError,
        "state_batch_indices",
        id="m2-indices-row-twice",
    ),
    pytest.param(
        _mamba2,
        dict(state_batch_indices=torch.tensor([[0, 1]])),
        ValueError,
        "state_batch_indices",
        id="m2-indices-2d",
    ),
    pytest.param(
        _mamba2,
        dict(state=torch.randn(BATCH, NHEADS, HEADDIM, N).to(torch.bfloat16)),
        TypeError,
        "state",
        id="m2-state-bf16-x-f32",
    ),
    pytest.param(
        _mamba2,
        dict(state=torch.randn(BATCH, NHEADS, HEADDIM, N, 1)),
        ValueError,
        "state",
        id="state-5d",
    ),
]


@pytest.mark.parametrize("make,over,exc,name", BAD)
def test_bad_argument_is_named(make, over, exc, name):
    kw = make()
    for k, v in over.items():
        kw[k] = v(kw) if callable(v) else v  # a callable builds the bad value from the good ones
    before = {
        k: v.clone()
        for k, v in kw.items()
        if isinstance(v, torch.Tensor) and v.device.type == "cpu"
    }
    with pytest.raises(exc, match=rf"^{name}\b"):
        selective_state_update(**kw)
    for k, v in before.items():  # nothing was written before the error
        assert torch.equal(kw[k].detach(), v.detach()), k


@pytest.mark.parametrize("make", [_mamba1, _mamba2], ids=["mamba1", "mamba2"])
def test_requires_grad_state_is_fine_without_grad(make):
    kw = make(state=make()["state"].requires_grad_())
    with torch.no_grad():
        out = selective_state_update(**kw)
    assert out.shape == kw["x"].shape


def test_legitimate_views_are_accepted():
    """transformers' and mamba-ssm's decode arguments: Mamba-2 per-head values expanded over
    headdim (zero strides), parameters in the model's dtype, a state that is a strided slice of a
    larger cache, padding entries."""
    kw = _mamba2()
    assert kw["A"].stride() == (1, 0, 0) and kw["dt"].stride()[-1] == 0
    cache = torch.randn(BATCH, 2, NHEADS, HEADDIM, N)
    kw["state"] = cache[:, 1]
    selective_state_update(**kw)
    bf = {k: v.to(torch.bfloat16) for k, v in _mamba1().items() if isinstance(v, torch.Tensor)}
    bf["A"] = _mamba1()["A"]  # -exp(A_log.float()): float32 beside bf16 activations
    selective_state_update(**bf, dt_softplus=True)
    kw = _mamba2(state=torch.randn(BATCH + 3, NHEADS, HEADDIM, N))
    selective_state_update(**kw, state_batch_indices=torch.tensor([-1, BATCH + 2]))


@pytest.mark.parametrize("make", [_mamba1, _mamba2], ids=["mamba1", "mamba2"])
def test_checks_cached_only_for_layouts_that_passed(make):
    """The shape / dtype / device checks are cached by layout: a good call between two bad ones
    (same shapes, one argument in another dtype or shape) does not let the second through."""
    kw = make()
    bad_dtype = dict(kw, dt=kw["dt"].double())
    bad_shape = dict(kw, C=kw["C"][..., :-1])
    for _ in range(2):
        selective_state_update(**kw)
        with pytest.raises(TypeError, match=r"^dt\b"):
            selective_state_update(**bad_dtype)
        with pytest.raises(ValueError, match=r"^C\b"):
            selective_state_update(**bad_shape)
