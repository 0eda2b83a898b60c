"""Triton selective-scan kernels against the float64 reference: forward, last state, checkpoints
and every gradient.

``triton`` tests call the launchers directly on CPU tensors under TRITON_INTERPRET=1 (see the
conftest), with outputs from ``shapes.empty_*_outputs`` NaN-poisoned; ``gpu`` tests run the public
op on CUDA, including torch.compile(fullgraph=True).
"""

from __future__ import annotations

import os

import pytest
import torch

from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.ops.selective_scan.shapes import (
    CHECKPOINT_LEN,
    empty_backward_outputs,
    empty_forward_outputs,
)
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs

triton = pytest.importorskip("triton")

_ARGS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")

# (batch, dim, L, N, groups, has_D/z/bias, softplus, initial_state)
CASES = [
    pytest.param(2, 5, 1, 4, None, True, True, False, id="B2-D5-L1-N4"),
    pytest.param(1, 3, 7, 1, None, True, False, True, id="B1-D3-L7-N1-nosoftplus-init"),
    pytest.param(2, 4, 63, 4, 2, True, True, True, id="B2-D4-L63-N4-G2-init"),
    pytest.param(1, 6, 300, 4, None, False, True, False, id="B1-D6-L300-N4-bare"),
    pytest.param(1, 2, 2 * CHECKPOINT_LEN + 5, 3, None, True, True, True, id="B1-D2-L2CKp5-N3-init"),
]


def _inputs(batch, dim, L, N, groups, full, softplus, init, dtype, device, seed=0):
    kw = make_selective_scan_inputs(
        batch, dim, L, N, groups=groups, dtype=dtype, device=device, has_D=full, has_z=full,
        has_delta_bias=full, delta_softplus=softplus, has_initial_state=init, seed=seed,
    )
    g = torch.Generator().manual_seed(seed + 1)
    dout = torch.randn(batch, dim, L, generator=g, dtype=torch.float64).to(dtype).to(device)
    dlast = torch.randn(batch, dim, N, generator=g, dtype=torch.float64).to(device)
    return kw, dout, dlast.float() if dtype != torch.float64 else dlast


def _reference(kw, dout, dlast):
    """float64 outputs and gradients of every tensor input."""
    ins = {k: (kw[k].detach().double().requires_grad_() if kw[k] is not None else None) for k in _ARGS}
    out, last = selective_scan_reference(
        ins["u"], ins["delta"], ins["A"], ins["B"], ins["C"], ins["D"], ins["z"],
        ins["delta_bias"], kw["delta_softplus"], True, ins["initial_state"],
    )
    leaves = [k for k in _ARGS if ins[k] is not None]
    grads = torch.autograd.grad(
        (out, last), [ins[k] for k in leaves], (dout.double(), dlast.double())
    )
    return out, last, dict(zip(leaves, grads))


def _poison(ts):
    for t in ts:
        if t.is_floating_point():
            t.fill_(float("nan"))


def _run_launchers(kw, dout, dlast):
    from ssmscan.ops.selective_scan import triton_bwd, triton_fwd

    args = [kw[k] for k in _ARGS]
    u, delta, A, B, C, D, z, bias, init = args
    outs = empty_forward_outputs(u, A)
    _poison(outs)
    triton_fwd.launch(u, delta, A, B, C, D, z, bias, init, kw["delta_softplus"], *outs)
    grads = empty_backward_outputs(u, delta, A, B, C, D, z, bias, init)
    _poison([*grads[:5], *grads[5]])
    triton_bwd.launch(dout, dlast, u, delta, A, B, C, D, z, bias, init, outs[2],
                      kw["delta_softplus"], *grads[:5], grads[5])
    names = ["u", "delta", "A", "B", "C"] + [k for k in ("D", "z", "delta_bias", "initial_state") if kw[k] is not None]
    return outs, dict(zip(names, [*grads[:5], *grads[5]]))


def _check(kw, dout, dlast, outs, grads, dtype):
    out, last, ckpt = outs
    r_out, r_last, r_grads = _reference(kw, dout, dlast)
    assert out.dtype == kw["u"].dtype and out.is_contiguous()
    assert_close_to_reference("out", out, r_out, dtype)
    assert_close_to_reference("last_state", last, r_last, dtype)
    # checkpoint 0 is the initial state (or zeros)
    init = kw["initial_state"]
    ref0 = init if init is not None else torch.zeros_like(ckpt[:, :, 0])
    torch.testing.assert_close(ckpt[:, :, 0].cpu(), ref0.float().cpu(), rtol=0, atol=0)
    for k, g in grads.items():
        assert g.dtype == kw[k].dtype and g.shape == kw[k].shape, k
        assert_close_to_reference(f"d{k}", g, r_grads[k], dtype)


@pytest.mark.triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)")
@pytest.mark.parametrize("batch,dim,L,N,groups,full,softplus,init", CASES)
def test_triton_interpreter(batch, dim, L, N, groups, full, softplus, init):
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, full, softplus, init, torch.float32, "cpu")
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, torch.float32)


@pytest.mark.triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter tests need TRITON_INTERPRET=1 (no GPU)")
def test_triton_interpreter_no_dlast_bf16():
    kw, dout, _ = _inputs(1, 4, 37, 4, None, True, True, False, torch.bfloat16, "cpu")
    outs, grads = _run_launchers(kw, dout, None)
    _check(kw, dout, torch.zeros_like(outs[1]), outs, grads, torch.bfloat16)


GPU_CASES = [
    pytest.param(2, 64, 63, 16, None, id="B2-D64-L63-N16"),
    pytest.param(1, 96, 1000, 16, 3, id="B1-D96-L1000-N16-G3"),
    pytest.param(2, 130, 1, 4, None, id="B2-D130-L1-N4"),
    pytest.param(1, 512, 3001, 8, None, id="B1-D512-L3001-N8"),
]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("batch,dim,L,N,groups", GPU_CASES)
def test_triton_gpu(batch, dim, L, N, groups, dtype):
    kw, dout, dlast = _inputs(batch, dim, L, N, groups, True, True, True, dtype, "cuda", seed=L)
    outs, grads = _run_launchers(kw, dout, dlast)
    _check(kw, dout, dlast, outs, grads, dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph_training_step_gpu(dynamic):
    import ssmscan  # noqa: F401  (registers the ops)

    kw = make_selective_scan_inputs(2, 64, 200, 16, dtype=torch.float32, device="cuda")
    params = {k: kw[k].clone().requires_grad_() for k in ("A", "D", "delta_bias")}

    def loss_fn(u, delta, B, C, z, A, D, delta_bias):
        out, last, _ = torch.ops.ssmscan.selective_scan_fwd(
            u, delta, A, B, C, D, z, delta_bias, None, True)
        return out.float().square().mean() + last.square().mean()

    def step(fn, *args):
        loss = fn(*args)
        loss.backward()
        return loss.detach()

    args = [kw["u"], kw["delta"], kw["B"], kw["C"], kw["z"], params["A"], params["D"], params["delta_bias"]]
    eager = step(loss_fn, *args)
    eager_grads = [params[k].grad.clone() for k in ("A", "D", "delta_bias")]
    for p in params.values():
        p.grad = None
    got = step(torch.compile(loss_fn, fullgraph=True, dynamic=dynamic), *args)
    torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-6)
    for k, ref in zip(("A", "D", "delta_bias"), eager_grads):
        torch.testing.assert_close(params[k].grad, ref, rtol=1e-5, atol=1e-6)
