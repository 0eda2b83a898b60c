"""torch.compile (fullgraph, every backend, dynamic shapes) and torch.export of selective_scan."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch.export import Dim

import ssmscan
from ssmscan.testing import make_selective_scan_inputs

BACKENDS = ["eager", "aot_eager", "inductor", "inductor-dynamic"]


def _step(u, delta, A, B, C, D, z, delta_bias, initial_state):
    out, last = ssmscan.selective_scan(
        u, delta, A, B, C, D, z, delta_bias, True, True, initial_state
    )
    return out, last


def _inputs(L, seed=0):
    return make_selective_scan_inputs(2, 4, L, 16, groups=2, seed=seed, has_initial_state=True)


def _grads(fn, kw):
    leaves = {
        k: v.detach().clone().requires_grad_() for k, v in kw.items() if isinstance(v, torch.Tensor)
    }
    out, last = fn(
        *(leaves[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state"))
    )
    (out.square().sum() + last.sum()).backward()
    return out.detach(), last.detach(), {k: v.grad for k, v in leaves.items()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_compile_fullgraph_forward_backward(backend):
    torch._dynamo.reset()
    dynamic = backend.endswith("-dynamic")
    counter = CompileCounterWithBackend(backend.removesuffix("-dynamic"))
    compiled = torch.compile(_step, backend=counter, fullgraph=True, dynamic=dynamic or None)
    # The lengths straddle CHECKPOINT_LEN (256): the checkpoint dimension must never be size 1,
    # or the 0/1 size specialization would guard L <= 256 and recompile here.
    for L in (37, 300) if dynamic else (37,):
        kw = _inputs(L, seed=L)
        out, last, grads = _grads(compiled, kw)
        ref_out, ref_last, ref_grads = _grads(_step, kw)
        torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(last, ref_last, rtol=1e-5, atol=1e-5)
        for k in ref_grads:
            torch.testing.assert_close(grads[k], ref_grads[k], rtol=1e-5, atol=1e-5, msg=k)
    assert counter.frame_count == 1  # one frame, no graph break, no recompile for a new L


class _Block(torch.nn.Module):
    def __init__(self, dim=4, N=16):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.A_log = torch.nn.Parameter(torch.randn(dim, N, generator=g) * 0.5)
        self.D = torch.nn.Parameter(torch.randn(dim, generator=g))
        self.bias = torch.nn.Parameter(torch.randn(dim, generator=g) - 3)

    def forward(self, u, delta, B, C, z):
        return ssmscan.selective_scan(
            u, delta, -torch.exp(self.A_log), B, C, self.D, z, self.bias, True
        )


def _block_inputs(L, seed=0):
    kw = make_selective_scan_inputs(2, 4, L, 16, seed=seed)
    return tuple(kw[k] for k in ("u", "delta", "B", "C", "z"))


def _count_ssmscan_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and "ssmscan" in str(n.target)]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamicL"])
def test_export_one_node_save_load(dynamic, tmp_path):
    block = _Block()
    shapes = None
    if dynamic:
        L = Dim("L", min=2, max=4096)
        shapes = ({2: L}, {2: L}, {2: L}, {2: L}, {2: L})
    ep = torch.export.export(block, _block_inputs(50), dynamic_shapes=shapes)
    nodes = _count_ssmscan_nodes(ep.graph_module)
    assert [str(n.target) for n in nodes] == ["ssmscan.selective_scan_fwd.default"]
    path = tmp_path / "block.pt2"
    torch.export.save(ep, path)
    loaded = torch.export.load(path)
    for L in (50, 777) if dynamic else (50,):
        args = _block_inputs(L, seed=L)
        torch.testing.assert_close(loaded.module()(*args), block(*args))


def test_export_graph_does_not_grow_with_length():
    block = _Block()
    sizes = {len(torch.export.export(block, _block_inputs(L)).graph.nodes) for L in (8, 1000)}
    assert len(sizes) == 1
