"""Graphs holding higher_order.associative_scan, made both ways the issue asks for."""

from __future__ import annotations

import torch
from torch._higher_order_ops.associative_scan import associative_scan, associative_scan_op
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

BANNED = ("ones_like", "zeros_like", "empty_like", "full_like", "new_")


class FrontEnd(torch.nn.Module):
    """torch's own front door (needs CUDA for pointwise mode: exported with fake CUDA inputs)."""

    def __init__(self, combine, dim, reverse):
        super().__init__()
        self.combine, self.dim, self.reverse = combine, dim, reverse

    def forward(self, *xs):
        def combine(lhs, rhs):
            return tuple(self.combine(list(lhs), list(rhs)))

        return associative_scan(
            combine, tuple(xs), dim=self.dim, reverse=self.reverse, combine_mode="pointwise"
        )


class Direct(torch.nn.Module):
    """A direct call of associative_scan_op on CPU with a traced combine graph (dim/reverse by hand)."""

    def __init__(self, combine, examples, dim, reverse):
        super().__init__()
        k = len(examples)
        slices = [x.select(dim, 0) for x in examples]
        self.cg = make_fx(lambda *a: tuple(combine(list(a[:k]), list(a[k:]))))(
            *slices, *[s.clone() for s in slices]
        )
        self.dim, self.reverse = dim, reverse

    def forward(self, *xs):
        xs = [x.movedim(self.dim, 0) for x in xs]
        if self.reverse:
            xs = [x.flip(0) for x in xs]
        ys = associative_scan_op(self.cg, list(xs), ())
        if self.reverse:
            ys = [y.flip(0) for y in ys]
        return tuple(y.movedim(0, self.dim) for y in ys)


def export(kind, combine, examples, dim=0, reverse=False, dynamic_shapes=None):
    if dynamic_shapes is not None:  # forward(*xs): one entry holding the per-input specs
        dynamic_shapes = (tuple(dynamic_shapes),)
    if kind == "fake_cuda":
        with FakeTensorMode(allow_non_fake_inputs=True):
            fake = [torch.empty(x.shape, dtype=x.dtype, device="cuda") for x in examples]
            return torch.export.export(
                FrontEnd(combine, dim, reverse), tuple(fake), dynamic_shapes=dynamic_shapes
            )
    assert kind == "direct"
    return torch.export.export(
        Direct(combine, examples, dim, reverse), tuple(examples), dynamic_shapes=dynamic_shapes
    )


def call_targets(program):
    gm = program.graph_module if isinstance(program, torch.export.ExportedProgram) else program
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def hop_nodes(program):
    """Every call of a higher-order op (``str(scan_op)`` is just ``"scan"``: test the type)."""
    from torch._ops import HigherOrderOperator

    gm = program.graph_module if isinstance(program, torch.export.ExportedProgram) else program
    return [
        n
        for m in gm.modules()
        if isinstance(m, torch.fx.GraphModule)
        for n in m.graph.nodes
        if n.op == "call_function" and isinstance(n.target, HigherOrderOperator)
    ]


def assert_plain(program):
    names = call_targets(program)
    assert not hop_nodes(program), [str(n.target) for n in hop_nodes(program)]
    assert not any(bad in n for n in names for bad in BANNED), names


def run(program, *xs):
    out = program.module()(*xs)
    return list(out) if isinstance(out, (list, tuple)) else [out]
