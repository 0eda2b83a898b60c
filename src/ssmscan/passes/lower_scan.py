"""Lower an affine ``torch.ops.higher_order.scan`` to the parallel affine scan, on request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import sympy
import torch
import torch.fx as fx
from torch._higher_order_ops.scan import scan_op

from ssmscan.scan import DEFAULT_CHUNK_SIZE, Algorithm, affine_scan, choose_algorithm
from ssmscan.scan import _aten as T

from . import _graph as G
from ._symbolic import SymbolicGraph, equal, read_polynomial

OP_NAME = "scan"


def lower_scan(
    program: Any, algorithm: Algorithm = "auto", chunk_size: int = DEFAULT_CHUNK_SIZE
) -> G.PassResult:
    """Affine ``higher_order.scan`` (carry h, h' = P(x) h + Q(x)) in, parallel affine scan out.

    Recognised: one carry ``h`` whose update reads as ``P * h + Q`` with P, Q any pointwise
    functions of the scanned inputs and additional inputs (``exp(dt * A) * h + dt * B * u`` included);
    each per-step output equal to the new state or to the previous one. Static lengths only. Any
    other scan is left untouched, with the reason recorded. Loops are usually the better realisation
    (O(L) work); this pass is for backends that cannot run a loop (Torch-TensorRT).

    Args:
        program: ``ExportedProgram`` or ``GraphModule`` (changed in place).
        algorithm: "auto", "hillis_steele", "blelloch" or "chunked".
        chunk_size: chunk length of the two-level scan.

    Returns:
        A :class:`PassResult`; truthy iff the graph changed.
    """
    gm, program_ = G.graph_module_of(program)
    decisions = []
    changed = False
    for node in G.nodes_calling(gm, scan_op):
        decision, fn, inputs = _plan(gm, node, algorithm, chunk_size)
        decisions.append(decision)
        if fn is None:
            continue
        tag = {"source": node.name, "op": OP_NAME, "algorithm": str(decision.algorithm)}
        G.splice(gm, node, fn, inputs, tag)
        changed = True
    if changed:
        G.finish(gm, program_)
    return G.PassResult(changed, tuple(decisions))


def explain_scan(gm: fx.GraphModule, node: fx.Node, algorithm: Algorithm = "auto") -> G.Decision:
    """What :func:`lower_scan` would do with ``node``, without changing anything."""
    return _plan(gm, node, algorithm, DEFAULT_CHUNK_SIZE)[0]


def _plan(gm: fx.GraphModule, node: fx.Node, algorithm: Algorithm, chunk_size: int) -> Any:
    def left(reason: str) -> Any:
        return G.Decision(node.name, OP_NAME, False, None, reason), None, ()

    if len(node.args) != 4 or node.kwargs:
        return left("unexpected signature")
    combine_node, init, xs, extras = node.args
    combine = G.submodule(gm, combine_node) if isinstance(combine_node, fx.Node) else None
    if combine is None:
        return left("combine function is not a graph module attribute")
    init = list(cast(Sequence[fx.node.Argument], init))
    xs = list(cast(Sequence[fx.node.Argument], xs))
    extras = list(cast(Sequence[fx.node.Argument], extras))
    if len(init) != 1:
        return left(f"{len(init)} carries; only a single affine carry is lowered")
    if not xs:
        return left("nothing is scanned over")
    if not all(isinstance(n, fx.Node) and "val" in n.meta for n in init + xs + extras):
        return left("inputs carry no fake values (node.meta['val'])")
    inputs = cast(list[fx.Node], init + xs + extras)  # all checked to be nodes just above
    length = inputs[len(init)].meta["val"].shape[0]
    if not isinstance(length, int):
        return left(f"dynamic length {length}: the parallel form needs a static length")
    n_out = len(node.meta["val"])
    if G.output_users(node, n_out) is None:
        return left("outputs are used other than through getitem")
    if any(n.op == "get_attr" for n in combine.graph.nodes):
        return left("combine reads a constant")
    sym = read_polynomial(combine, watched={0})
    if sym is None:
        return left("combine is not a pointwise function affine in the carry")
    h = sym.inputs[0]
    new = sympy.expand(sym.outputs[0])
    poly = sympy.Poly(new, h) if new.has(h) else None
    if poly is None or poly.degree() != 1:
        return left("carry update is not affine in the carry (degree != 1)")
    p_expr, q_expr = poly.coeff_monomial(h), poly.coeff_monomial(1)
    if p_expr.is_number or q_expr.is_number:
        return left("a constant decay or input is not lowered (would need a constant factory)")
    kinds = []
    for y in sym.outputs[1:]:
        if equal(y, new):
            kinds.append("new")
        elif equal(y, h):
            kinds.append("old")
        else:
            return left("a per-step output is neither the new nor the previous carry")
    algo = cast(Algorithm, choose_algorithm(length, algorithm))  # always one of ALGORITHMS
    k = len(xs)

    def fn(h0: torch.Tensor, *args: torch.Tensor) -> list[torch.Tensor]:
        full = [length, *h0.shape]
        env = _bind(combine, sym, list(args), k)
        a = _broadcast(_to_torch(p_expr, env), full, h0.dtype)
        b = _broadcast(_to_torch(q_expr, env), full, h0.dtype)
        states = affine_scan(a, b, 0, initial=h0, algorithm=algo, chunk_size=chunk_size)
        outs = [torch.ops.aten.select.int(states, 0, length - 1)]
        for kind in kinds:
            if kind == "new":
                outs.append(states)
            else:
                prev = torch.ops.aten.unsqueeze.default(h0, 0)
                outs.append(
                    T.cat([prev, T.narrow(states, 0, 0, length - 1)], 0) if length > 1 else prev
                )
        return outs

    reason = f"affine carry update h' = P*h + Q as the affine {algo} scan"
    return G.Decision(node.name, OP_NAME, True, algo, reason), fn, tuple(inputs)


def _bind(
    combine: fx.GraphModule, sym: SymbolicGraph, args: list[torch.Tensor], k: int
) -> dict[sympy.Symbol, Any]:
    """Symbols to tensors: scanned inputs (whole sequences), extras, and opaque nodes evaluated."""
    env: dict[sympy.Symbol, Any] = dict(zip(sym.inputs[1:], args, strict=True))
    if sym.opaque:
        values: dict[fx.Node, Any] = {}
        placeholders = [n for n in combine.graph.nodes if n.op == "placeholder"]
        for p, a in zip(placeholders[1:], args, strict=True):
            values[p] = a
        wanted = set(sym.opaque.values())
        for n in combine.graph.nodes:  # topological; the carry placeholder is never needed
            if n.op != "call_function" or not _needed(n, wanted):
                continue
            fargs = fx.node.map_arg(n.args, lambda x: values[x])
            fkwargs = fx.node.map_arg(n.kwargs, lambda x: values[x])
            values[n] = n.target(*fargs, **fkwargs)
        for s, n in sym.opaque.items():
            env[s] = values[n]
    return env


def _needed(node: fx.Node, wanted: set[fx.Node]) -> bool:
    todo, seen = list(wanted), set()
    while todo:
        n = todo.pop()
        if n is node:
            return True
        if n not in seen:
            seen.add(n)
            todo.extend(n.all_input_nodes)
    return False


def _to_torch(expr: sympy.Expr, env: dict[sympy.Symbol, Any]) -> Any:
    if expr.is_Symbol:
        return env[expr]
    if expr.is_Integer:
        return int(expr)
    if expr.is_Number:
        return float(expr)
    parts = [_to_torch(a, env) for a in expr.args]
    if expr.is_Add or expr.is_Mul:
        tensors = [p for p in parts if isinstance(p, torch.Tensor)]
        scalars = [p for p in parts if not isinstance(p, torch.Tensor)]
        acc = tensors[0]
        for t in tensors[1:]:
            acc = acc + t if expr.is_Add else acc * t
        for s in scalars:
            acc = acc + s if expr.is_Add else acc * s
        return acc
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) != 0:
        base, e = parts[0], int(expr.exp)
        acc = base
        for _ in range(abs(e) - 1):
            acc = acc * base
        return acc if e > 0 else torch.ops.aten.reciprocal.default(acc)
    raise NotImplementedError(f"cannot emit {expr}")


def _broadcast(x: torch.Tensor, full: list[int], dtype: torch.dtype) -> torch.Tensor:
    if list(x.shape) != full:
        x = torch.ops.aten.expand.default(x, full)
    return x if x.dtype == dtype else x.to(dtype)
