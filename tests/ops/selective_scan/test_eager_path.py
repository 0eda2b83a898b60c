"""Note [eager CUDA fast path]: ``ssmscan.selective_scan`` calls the Triton launchers from an
``autograd.Function`` in plain eager CUDA calls, the op everywhere else.

CPU: the path's autograd formula under the Triton interpreter against the float64 reference
(outputs, last state, every gradient; a loss on the last state only, so ``dout`` is None), and
when the path declines. GPU: the API's results and gradients equal the op's bit for bit, and
the path was taken."""

from __future__ import annotations

import os

import pytest
import torch

from ssmscan.ops.selective_scan import eager
from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs

_ARGS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")


def _inputs(device, dtype=torch.float32, seed=3, batch=2, dim=5, L=37, N=4, init=True):
    kw = make_selective_scan_inputs(
        batch, dim, L, N, dtype=dtype, device=device, has_initial_state=init, seed=seed,
        has_D=True, has_z=True, has_delta_bias=True, delta_softplus=True,
    )  # fmt: skip
    return {k: (kw[k].clone().requires_grad_() if kw[k] is not None else None) for k in _ARGS}


def _loss_and_grads(fn, ins, g_out, g_last):
    out, last = fn(ins)
    terms = [(last * g_last).sum()]
    if g_out is not None:
        terms.append((out.double() * g_out).sum())
    leaves = [k for k in _ARGS if ins[k] is not None]
    grads = torch.autograd.grad(sum(terms), [ins[k] for k in leaves], allow_unused=True)
    # unused (the reference's C and z when only the last state counts): zero gradients
    grads = [torch.zeros_like(ins[k]) if g is None else g for k, g in zip(leaves, grads)]
    return out, last, dict(zip(leaves, grads))


@pytest.mark.triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1")
@pytest.mark.parametrize("with_out", [True, False], ids=["out-and-last", "last-only"])
def test_eager_function_matches_reference(with_out):
    """``eager.selective_scan`` (the launchers under ``_Scan``) on CPU tensors under the
    interpreter: forward and every gradient against float64; ``last-only`` leaves ``dout`` None
    (set_materialize_grads off: the backward makes the zeros itself)."""
    ins = _inputs("cpu")
    g = torch.Generator().manual_seed(11)
    g_out = torch.randn(ins["u"].shape, generator=g, dtype=torch.float64) if with_out else None
    g_last = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)

    def ours(t):
        return eager.selective_scan(*(t[k] for k in _ARGS), True)

    def ref(t):
        d = {
            k: (v.detach().double().requires_grad_() if v is not None else None)
            for k, v in t.items()
        }
        t.update(d)
        return selective_scan_reference(*(t[k] for k in _ARGS[:8]), True, True, t["initial_state"])

    out, last, grads = _loss_and_grads(ours, ins, g_out, g_last.float())
    r_ins = dict(ins)
    r_out, r_last, r_grads = _loss_and_grads(ref, r_ins, g_out, g_last)
    assert_close_to_reference("out", out, r_out, torch.float32)
    assert_close_to_reference("last_state", last, r_last, torch.float32)
    for k, v in grads.items():
        assert v.shape == ins[k].shape and v.dtype == ins[k].dtype, k
        assert_close_to_reference(f"d{k}", v, r_grads[k], torch.float32)


@pytest.mark.triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1")
def test_eager_function_without_grad_returns_plain_tensors():
    ins = {k: (v.detach() if v is not None else None) for k, v in _inputs("cpu").items()}
    out, last = eager.selective_scan(*(ins[k] for k in _ARGS), True)
    assert out.grad_fn is None and not out.requires_grad and last.shape == (2, 5, 4)
    with torch.no_grad():
        out2, _ = eager.selective_scan(*(_inputs("cpu")[k] for k in _ARGS), True)
    assert out2.grad_fn is None
    torch.testing.assert_close(out, out2, rtol=0, atol=0)


@pytest.mark.triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1")
def test_eager_function_double_backward_fails_like_the_op():
    """Differentiating the gradients (``create_graph``) must fail as on the op path (the backward
    op has no autograd formula), not silently treat them as constants: a gradient penalty would
    otherwise lose its scan term."""
    ins = _inputs("cpu", L=9)
    out, _ = eager.selective_scan(*(ins[k] for k in _ARGS), True)
    (du,) = torch.autograd.grad(out.sum(), ins["u"], create_graph=True)
    assert du.requires_grad
    with pytest.raises(RuntimeError, match="autograd"):
        torch.autograd.grad((du**2).sum(), ins["u"])
    # the op path, for comparison: the same failure
    out2, _, _ = torch.ops.ssmscan.selective_scan_fwd(*(ins[k] for k in _ARGS), True)
    (du2,) = torch.autograd.grad(out2.sum(), ins["u"], create_graph=True)
    with pytest.raises(RuntimeError, match="autograd"):
        torch.autograd.grad((du2**2).sum(), ins["u"])
    torch.testing.assert_close(du.detach(), du2.detach())


def test_plain_eager_declines_under_tracing_modes_and_subclasses():
    """The checks that keep the op (and so one graph node, profiler names, mode handling)
    wherever something other than plain eager is running."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(3)
    p = torch.nn.Parameter(torch.randn(3))
    assert eager.plain_eager((x, p, None))
    with FakeTensorMode() as mode:
        assert not eager.plain_eager((mode.from_tensor(x),))
    assert not eager.plain_eager((FakeTensorMode().from_tensor(x),))  # a subclass, no mode
    with torch.device("cpu"):  # a torch-function mode
        assert not eager.plain_eager((x,))
    seen = []
    torch.vmap(lambda t: seen.append(eager.plain_eager((t,))) or t)(torch.randn(2, 3))
    assert seen == [False]
    with torch.profiler.profile():
        assert not eager.plain_eager((x,))
    compiled = torch.compile(
        lambda t: t + 1 if eager.plain_eager((t,)) else t - 1, backend="eager", fullgraph=True
    )
    torch.testing.assert_close(compiled(x), x - 1)
    assert eager.plain_eager((x,))  # nothing left switched on


def test_fast_path_needs_cuda():
    x = torch.randn(3)
    assert not eager.fast_path_ok((x,), True)  # CPU: the op (the C kernel)
    if torch.cuda.is_available():
        xc = x.cuda()
        assert eager.fast_path_ok((xc,), True) and eager.fast_path_ok((xc,), False)
        assert not eager.fast_path_ok((xc.double(),), True)  # float64: the op's host-copy path
        # not a bool: the op's schema converts (0, 1) or rejects it
        assert not eager.fast_path_ok((xc,), 1) and not eager.fast_path_ok((xc,), "yes")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("with_out", [True, False], ids=["out-and-last", "last-only"])
def test_api_fast_path_equals_op_gpu(dtype, with_out, monkeypatch):
    """The API's fast path and the op give the same outputs and gradients bit for bit (same
    kernels, same launch parameters); the fast path was taken (and not taken when off)."""
    from ssmscan.ops.selective_scan.api import _run_op

    calls = []
    real = eager._forward
    monkeypatch.setattr(eager, "_forward", lambda *a: calls.append(1) or real(*a))
    g = torch.Generator(device="cuda").manual_seed(2)
    res = {}
    for fast in (True, False):
        ins = _inputs("cuda", dtype, batch=2, dim=64, L=777, N=16)
        g_out = (
            torch.randn(ins["u"].shape, generator=g.manual_seed(2), device="cuda")
            if with_out
            else None
        )
        g_last = torch.randn(2, 64, 16, generator=g.manual_seed(3), device="cuda")

        def api(t, fast=fast):  # the API's path for op-form arguments
            return _run_op("auto", *(t[k] for k in _ARGS), True, eager_fast_path=fast)

        res[fast] = _loss_and_grads(api, ins, g_out, g_last)
    assert len(calls) == 1
    (o1, l1, g1), (o2, l2, g2) = res[True], res[False]
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
    for k in g1:
        assert torch.equal(g1[k], g2[k]), k
