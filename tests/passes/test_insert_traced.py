"""``passes._graph.insert_traced``, the one splice every lowering and decomposition goes
through: outputs rerouted, provenance and tags on the new nodes, and a refusal that leaves the
graph as it was."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx

from ssmscan.passes import _graph as G


class _TwoOut(torch.nn.Module):
    def forward(self, x):
        a, b = torch.ops.aten.var_mean.correction(x, [1], correction=0, keepdim=True)
        return x - b, a.sum()


def _program():
    gm = torch.export.export(_TwoOut(), (torch.randn(3, 5),)).module()
    node = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.var_mean.correction)
    return gm, node


def _mean_var(x):
    m = x.mean(1, keepdim=True)
    return [((x - m) ** 2).mean(1, keepdim=True), m]


def test_reroutes_outputs_and_tags_the_new_nodes():
    gm, node = _program()
    x = torch.randn(3, 5)
    want = gm(x)
    inputs = [node.args[0]]
    traced = G.trace_on_fakes(_mean_var, [i.meta["val"] for i in inputs])
    G.insert_traced(gm, node, traced, inputs, {"pass": "test"}, G.PROVENANCE)
    gm.recompile()
    assert not any(n.target is torch.ops.aten.var_mean.correction for n in gm.graph.nodes)
    tagged = [n for n in gm.graph.nodes if n.meta.get(G.LOWERING_META) == {"pass": "test"}]
    assert tagged and all("nn_module_stack" in n.meta for n in tagged)
    for g, w in zip(gm(x), want):
        torch.testing.assert_close(g, w)


def test_a_constant_is_refused_and_the_graph_left_as_it_was():
    gm, node = _program()
    before = [(n.op, n.target, n.args) for n in gm.graph.nodes]
    inputs = [node.args[0]]
    bias = torch.randn(3, 1)
    traced = G.trace_on_fakes(lambda x: [x.var(1, keepdim=True) + bias, x.mean(1, keepdim=True)],
                              [i.meta["val"] for i in inputs])  # fmt: skip
    with pytest.raises(RuntimeError, match="must not create constants"):
        G.insert_traced(gm, node, traced, inputs, {"pass": "test"})
    assert [(n.op, n.target, n.args) for n in gm.graph.nodes] == before


def test_outputs_read_other_than_through_getitem_are_refused():
    gm, node = _program()
    with gm.graph.inserting_after(node):
        gm.graph.call_function(print, (node,))
    before = len(gm.graph.nodes)
    inputs = [node.args[0]]
    traced = G.trace_on_fakes(_mean_var, [i.meta["val"] for i in inputs])
    with pytest.raises(RuntimeError, match="other than through getitem"):
        G.insert_traced(gm, node, traced, inputs, {"pass": "test"})
    assert len(gm.graph.nodes) == before
    assert isinstance(gm, fx.GraphModule)
