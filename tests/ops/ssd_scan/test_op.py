"""The ops ssmscan::ssd_scan_fwd / ssd_scan_bwd: opcheck, fakes against real outputs, autograd
plumbing, torch.compile (fullgraph, every backend, dynamic shapes) and torch.export."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.export import Dim

import ssmscan

ARGS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states", "seq_idx")


def _op_args(kw, dt_limit=(0.0, float("inf")), chunk_size=16):
    return (
        *(kw.get(k) for k in ARGS),
        kw["dt_softplus"],
        float(dt_limit[0]),
        float(dt_limit[1]),
        chunk_size,
    )


SAMPLES = {
    "L1-plain": dict(L=1, D_shape=None),
    "L37-full": dict(
        L=37, D_shape="channel", z=True, dt_bias=True, dt_softplus=True, initial_states=True
    ),
    "L33-packed": dict(L=33, z=True, dt_softplus=True, initial_states=True, seq_idx=True),
    "L16-Dhead-bf16": dict(L=16, dtype=torch.bfloat16, dt_bias=True, ngroups=1),
}


def _requires_grad(kw):
    return {
        k: (v.detach().clone().requires_grad_() if isinstance(v, torch.Tensor) and
            v.is_floating_point() else v)
        for k, v in kw.items()
    }  # fmt: skip


@pytest.mark.parametrize("sample", list(SAMPLES))
def test_opcheck(sample, ssd_inputs):
    kw = _requires_grad(ssd_inputs(**SAMPLES[sample]))
    torch.library.opcheck(torch.ops.ssmscan.ssd_scan_fwd.default, _op_args(kw))


@pytest.mark.parametrize("sample", list(SAMPLES))
def test_fakes_match_real_outputs(sample, ssd_inputs):
    """Shapes, dtypes and strides of every output of both ops, real against fake; nothing
    unwritten (NaN-poisoned inputs of the real op would show) and no output aliases an input."""
    kw = ssd_inputs(**SAMPLES[sample])
    args = _op_args(kw)
    real = torch.ops.ssmscan.ssd_scan_fwd(*args)
    dout = torch.randn_like(real[0])
    bwd_args = (dout, torch.randn_like(real[1]), *args)
    real_bwd = torch.ops.ssmscan.ssd_scan_bwd(*bwd_args)
    with FakeTensorMode() as mode:
        fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        fake = torch.ops.ssmscan.ssd_scan_fwd(*fake_args)
        fake_bwd = torch.ops.ssmscan.ssd_scan_bwd(
            mode.from_tensor(dout), mode.from_tensor(real[1]), *fake_args
        )

    def flat(t):
        return [y for x in t for y in (x if isinstance(x, list) else [x])]

    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    for r, f in zip(flat(real) + flat(real_bwd), flat(fake) + flat(fake_bwd), strict=True):
        assert (r.shape, r.dtype, r.stride()) == (f.shape, f.dtype, f.stride())
        assert not torch.isnan(r).any()
        assert all(r.data_ptr() != a.data_ptr() for a in inputs if a.numel())


def test_gradient_of_final_states_alone(ssd_inputs):
    """Only final_states used: the op's backward gets no output gradient."""
    kw = _requires_grad(ssd_inputs(L=20, initial_states=True))
    _, final = ssmscan.ssd_scan(**kw, return_final_states=True)
    final.sum().backward()
    ref = _requires_grad({k: v.detach() if isinstance(v, torch.Tensor) else v
                          for k, v in kw.items()})  # fmt: skip
    _, ref_final = ssmscan.ssd_scan(**ref, return_final_states=True, impl="reference")
    ref_final.sum().backward()
    for k in ("x", "dt", "A", "B", "initial_states"):
        torch.testing.assert_close(kw[k].grad, ref[k].grad, rtol=1e-5, atol=1e-5, msg=k)
    assert kw["C"].grad.abs().max() == 0  # C only reads out


BACKENDS = ["eager", "aot_eager", "inductor", "inductor-dynamic"]


def _step(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx):
    return ssmscan.ssd_scan(
        x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, initial_states=initial_states,
        seq_idx=seq_idx, dt_softplus=True, return_final_states=True,
    )  # fmt: skip


def _grads(fn, kw):
    leaves = _requires_grad(kw)
    out, final = fn(*(leaves.get(k) for k in ARGS))
    (out.square().sum() + final.sum()).backward()
    return (
        out.detach(),
        final.detach(),
        {k: v.grad for k, v in leaves.items() if isinstance(v, torch.Tensor) and v.requires_grad},
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_compile_fullgraph_forward_backward(backend, ssd_inputs):
    torch._dynamo.reset()
    dynamic = backend.endswith("-dynamic")
    counter = CompileCounterWithBackend(backend.removesuffix("-dynamic"))
    compiled = torch.compile(_step, backend=counter, fullgraph=True, dynamic=dynamic or None)
    opts = dict(D_shape="channel", z=True, dt_bias=True, dt_softplus=True, initial_states=True,
                seq_idx=True)  # fmt: skip
    frames = []
    for L in (37, 300) if dynamic else (37,):
        kw = ssd_inputs(L=L, seed=L, **opts)
        out, final, grads = _grads(compiled, kw)
        ref_out, ref_final, ref_grads = _grads(_step, kw)
        torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(final, ref_final, rtol=1e-5, atol=1e-5)
        assert set(grads) == set(ref_grads)
        for k in ref_grads:
            torch.testing.assert_close(grads[k], ref_grads[k], rtol=1e-5, atol=1e-5, msg=k)
        frames.append(counter.frame_count)
    # fullgraph: no graph break. Inductor with dynamic shapes restarts the first analysis once to
    # specialize the float dt_limit (a custom op's float argument cannot be a tensor), hence
    # up to 2 backend calls on the first length; a new length must add none.
    assert frames[0] <= (2 if backend == "inductor-dynamic" else 1)
    assert frames[-1] == frames[0]


class _Block(torch.nn.Module):
    def __init__(self, nheads=4):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.A_log = torch.nn.Parameter(torch.randn(nheads, generator=g) * 0.5)
        self.D = torch.nn.Parameter(torch.randn(nheads, generator=g))
        self.dt_bias = torch.nn.Parameter(torch.randn(nheads, generator=g) - 3)

    def forward(self, x, dt, B, C, z):
        return ssmscan.ssd_scan(
            x, dt, -torch.exp(self.A_log), B, C, D=self.D, z=z, dt_bias=self.dt_bias,
            dt_softplus=True,
        )  # fmt: skip


def _block_inputs(ssd_inputs, L, seed=0):
    kw = ssd_inputs(L=L, z=True, seed=seed)
    return tuple(kw[k] for k in ("x", "dt", "B", "C", "z"))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamicL"])
def test_export_one_node_save_load(dynamic, tmp_path, ssd_inputs):
    block = _Block()
    shapes = None
    if dynamic:
        L = Dim("L", min=2, max=4096)
        shapes = ({1: L}, {1: L}, {1: L}, {1: L}, {1: L})
    ep = torch.export.export(block, _block_inputs(ssd_inputs, 50), dynamic_shapes=shapes)
    nodes = [n for n in ep.graph.nodes if n.op == "call_function" and "ssmscan" in str(n.target)]
    assert [str(n.target) for n in nodes] == ["ssmscan.ssd_scan_fwd.default"]
    path = tmp_path / "block.pt2"
    torch.export.save(ep, path)
    loaded = torch.export.load(path)
    for L in (50, 777) if dynamic else (50,):
        args = _block_inputs(ssd_inputs, L, seed=L)
        torch.testing.assert_close(loaded.module()(*args), block(*args))
