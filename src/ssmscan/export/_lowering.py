"""Realizing ssmscan ops for targets that cannot run them (onnx, aoti on CPU, executorch)."""

from __future__ import annotations

import sympy
import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._guards import detect_fake_mode

from ssmscan.passes import LOOP_BACKEND_PIPELINE, decompose_selective_scan, run_pipeline

from ._common import ExportReport
from ._signature import Signature


def lower_for_loop_backends(
    ep: torch.export.ExportedProgram, realization: str, algorithm: str, report: ExportReport
) -> None:
    """ssmscan ops -> ``realization``; remaining ``associative_scan`` HOPs -> parallel aten.

    Traced without autograd: an export is for inference, and ``higher_order.scan`` traced with
    grad enabled builds its backward graph, which fails on a symbolic batch (torch 2.13:
    "SymIntArrayRef expected to contain only concrete integers" in ``expand_copy``).
    """
    with report.stage("decompose"), torch.no_grad():
        res = decompose_selective_scan(ep, realization, algorithm)  # type: ignore[arg-type]
        low = run_pipeline(ep, LOOP_BACKEND_PIPELINE)
    report.realization = realization
    for d in (*res.decisions, *low.decisions):
        report.notes.append(f"{d}")


def bind_scan_sizes(ep: torch.export.ExportedProgram) -> int:
    """Pass every ``higher_order.scan`` the symbolic sizes of its outputs as extra (unused)
    inputs; returns how many scans changed.

    Inductor turns a scan into a ``while_loop`` and allocates the stacked outputs from sizes it
    finds among the scan's SymInt inputs and its length (torch 2.13,
    ``decompose_scan_to_while_loop``); Dynamo lifts those sizes as inputs, ``torch.export`` does
    not, and a dynamic batch then fails with ``KeyError: s<n>``.
    """
    changed = 0
    for mod in list(ep.graph_module.modules()):
        if not isinstance(mod, fx.GraphModule):
            continue
        for node in list(
            mod.graph.find_nodes(op="call_function", target=torch.ops.higher_order.scan)
        ):
            extra = _size_nodes(mod.graph, node)
            if not extra:
                continue
            combine, init, xs, additional = node.args
            body = getattr(mod, combine.target)
            last = list(body.graph.find_nodes(op="placeholder"))[-1]
            with body.graph.inserting_after(last):
                for i, n in enumerate(reversed(extra)):
                    p = body.graph.placeholder(f"bound_size_{len(extra) - 1 - i}")
                    p.meta["val"] = n.meta["val"]
            body.recompile()
            node.args = (combine, init, xs, (*additional, *extra))
            changed += 1
        mod.recompile()
    return changed


def _size_nodes(graph: fx.Graph, node: fx.Node) -> list[fx.Node]:
    """``sym_size`` nodes (inserted before ``node``) for the free symbols of the scan's output
    sizes that neither its SymInt inputs nor its length bind."""
    _, init, xs, additional = node.args
    assert isinstance(xs, (list, tuple)) and isinstance(xs[0], fx.Node)  # scan's signature
    operands = [a for a in pytree.tree_leaves((init, xs, additional)) if isinstance(a, fx.Node)]
    bound: set[sympy.Symbol] = set()
    for a in operands:
        v = a.meta.get("val")
        if isinstance(v, torch.SymInt):
            bound |= v.node.expr.free_symbols
    length = xs[0].meta["val"].shape[0]
    if isinstance(length, torch.SymInt):
        bound |= length.node.expr.free_symbols
    needed: set[sympy.Symbol] = set()
    for v in pytree.tree_leaves(node.meta["val"]):
        for s in (*v.shape, *v.stride()):
            if isinstance(s, torch.SymInt):
                needed |= s.node.expr.free_symbols
    extra = []
    for sym in sorted(needed - bound, key=str):
        source = next(
            (
                (a, d, s)
                for a in operands
                if isinstance(a.meta.get("val"), torch.Tensor)
                for d, s in enumerate(a.meta["val"].shape)
                if isinstance(s, torch.SymInt) and s.node.expr == sym
            ),
            None,
        )
        if source is None:  # no operand has this size: leave the scan as it is
            continue
        a, d, s = source
        with graph.inserting_before(node):
            size = graph.call_function(torch.ops.aten.sym_size.int, (a, d))
        size.meta["val"] = s
        extra.append(size)
    return extra


def assert_id_ranges(ep: torch.export.ExportedProgram, signature: Signature) -> int:
    """Check in the graph that every token-id input lies in its range (``_assert_async``: a
    clean error from the compiled artifact instead of an out-of-bounds read); returns how many
    inputs got a check."""
    ranges = {s.name: s.value_range for s in signature.inputs if s.value_range is not None}
    graph = ep.graph
    placeholders = dict(zip(signature.input_names, ep.graph_signature.user_inputs, strict=True))
    nodes = {n.name: n for n in graph.find_nodes(op="placeholder")}
    count = 0
    for name, (lo, hi) in ranges.items():
        ids = nodes[placeholders[name]]
        val = ids.meta["val"]
        fake_mode = detect_fake_mode([val])
        if fake_mode is None:  # a program without fake values: leave it unchecked
            continue
        anchor = next(n for n in graph.nodes if n.op != "placeholder")
        msg = (
            f"{name} must hold int64 token ids in [{lo}, {hi}) (an id out of range, or ids of "
            "another dtype)"
        )
        with graph.inserting_before(anchor), fake_mode:
            ge = graph.call_function(torch.ops.aten.ge.Scalar, (ids, lo))
            ge.meta["val"] = torch.ops.aten.ge.Scalar(val, lo)
            lt = graph.call_function(torch.ops.aten.lt.Scalar, (ids, hi))
            lt.meta["val"] = torch.ops.aten.lt.Scalar(val, hi)
            both = graph.call_function(torch.ops.aten.logical_and.default, (ge, lt))
            both.meta["val"] = torch.ops.aten.logical_and.default(ge.meta["val"], lt.meta["val"])
            ok = graph.call_function(torch.ops.aten.all.default, (both,))
            ok.meta["val"] = torch.ops.aten.all.default(both.meta["val"])
            check = graph.call_function(torch.ops.aten._assert_async.msg, (ok, msg))
            check.meta["val"] = None
        count += 1
    if count:
        graph.lint()
        ep.graph_module.recompile()
    return count
