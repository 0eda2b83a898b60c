"""torch.compile (fullgraph, every backend, dynamic shapes) and torch.export of selective_scan."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch.export import Dim
from torch.utils._sympy.numbers import int_oo

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


@pytest.mark.triton
@pytest.mark.parametrize("facts", ["compiled", "interpreted"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_forward_host_code_adds_no_guard_on_batch_or_length(facts, dtype, monkeypatch):
    """The Triton forward's host code (planner and launcher) as torch.export traces it, with
    batch and L dynamic (what ``ssmscan report`` and ``ssmscan.export`` export): the kernels are
    not traced on the CPU (each launch's arguments are prepared as a traced launch prepares
    them), under an H200's facts and the interpreter's. The planner once guarded on the number
    of segments (a function of batch and L), which torch.export refused as inconsistent with
    the declared ranges, and a dynamic export of a Mamba LM failed on the GPU."""
    pytest.importorskip("triton")
    from ssmscan.ops.common import triton_launch
    from ssmscan.ops.common.device import H200, INTERPRETED
    from ssmscan.ops.selective_scan import triton_fwd
    from ssmscan.ops.selective_scan.shapes import empty_forward_outputs

    def prepare_only(self, grid, *args, **kwargs):
        self.traced_args(args, kwargs, triton_launch._first_tensor(args, kwargs))

    monkeypatch.setattr(triton_launch._Launcher, "_launch", prepare_only)
    device_facts = H200 if facts == "compiled" else INTERPRETED
    name = f"ssmscan_test::selective_scan_forward_host_{facts}_{str(dtype)[6:]}"

    @torch.library.triton_op(name, mutates_args=())
    def forward(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                C: torch.Tensor, D: torch.Tensor, z: torch.Tensor) -> torch.Tensor:  # fmt: skip
        out, last, ckpt = empty_forward_outputs(u, A)
        plan = triton_fwd.plan_for(u, A, B, C, facts=device_facts)
        assert plan.nseg == 1  # symbolic sizes: unsplit
        triton_fwd.launch(u, delta, A, B, C, D, z, None, None, True, out, last, ckpt, plan=plan)
        return out

    op = getattr(torch.ops.ssmscan_test, name.split("::")[1])

    class Scan(torch.nn.Module):
        def forward(self, u, delta, A, B, C, D, z):
            return op(u, delta, A, B, C, D, z)

    kw = make_selective_scan_inputs(2, 64, 300, 16, groups=1, seed=3)
    args = tuple(kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z"))
    args = tuple(a.to(dtype) if a.dim() >= 3 else a for a in args)
    batch, L = Dim("batch", min=1), Dim("L", min=1, max=65536)
    bl, bcl = {0: batch, 2: L}, {0: batch, 3: L}  # B, C: (batch, groups, N, L)
    ep = torch.export.export(Scan(), args, dynamic_shapes=(bl, bl, None, bcl, bcl, None, bl),
                             strict=False)  # fmt: skip
    ranges = sorted((r.lower, r.upper) for r in ep.range_constraints.values())
    assert ranges == [(1, 65536), (1, int_oo)], ranges
