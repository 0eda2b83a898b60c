"""Read a combine graph as polynomials, to recognise affine recurrences structurally.

Each placeholder becomes a sympy symbol; mul / add / sub / neg / addcmul / div-by-constant become
polynomial arithmetic; dtype casts, clones and aliases are transparent. A pointwise op outside that
set whose inputs do not involve a *watched* symbol becomes an opaque symbol standing for its node
(so ``exp(dt * A) * h + dt * B * u`` still reads as ``P * h + Q`` with watched ``h``). Anything else
makes the graph unreadable (``None``).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import sympy
import torch
import torch.fx as fx

aten = torch.ops.aten
prims = torch.ops.prims

_TRANSPARENT = {
    aten._to_copy.default,
    aten.clone.default,
    aten.alias.default,
    aten.to.dtype,
    aten.type_as.default,
    prims.convert_element_type.default,
    aten.detach.default,
    aten.contiguous.default,
}


def is_pointwise(node: fx.Node) -> bool:
    """Whether a call in a combine graph is elementwise (so it broadcasts over extra leading dims)."""
    target = node.target
    if target in _TRANSPARENT:
        return True
    if target is operator.getitem:
        return False
    tags = getattr(target, "tags", ())
    return torch.Tag.pointwise in tags


@dataclass
class SymbolicGraph:
    """Placeholders' symbols, outputs' expressions, and the nodes behind opaque symbols."""

    inputs: list[sympy.Symbol]
    outputs: list[sympy.Expr]
    opaque: dict[sympy.Symbol, fx.Node] = field(default_factory=dict)


def _scalar(x: object) -> sympy.Expr | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, float):
        return sympy.Float(x)
    return None


def read_polynomial(gm: fx.GraphModule, watched: set[int]) -> SymbolicGraph | None:
    """Symbolic outputs of ``gm``; placeholders at positions ``watched`` must stay polynomial."""
    env: dict[fx.Node, sympy.Expr] = {}
    inputs: list[sympy.Symbol] = []
    watched_syms: set[sympy.Symbol] = set()
    opaque: dict[sympy.Symbol, fx.Node] = {}
    outputs: list[sympy.Expr] = []

    def val(a: object) -> sympy.Expr | None:
        if isinstance(a, fx.Node):
            return env.get(a)
        return _scalar(a)

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            s = sympy.Symbol(f"p{len(inputs)}")
            if len(inputs) in watched:
                watched_syms.add(s)
            inputs.append(s)
            env[node] = s
            continue
        if node.op == "output":
            outs = node.args[0]
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            for o in outs:
                e = val(o)
                if e is None:
                    return None
                outputs.append(e)
            continue
        if node.op != "call_function":
            return None
        t = node.target
        args = [val(a) for a in node.args]
        kw = node.kwargs
        expr: sympy.Expr | None = None
        if t in _TRANSPARENT:
            expr = args[0]
        elif t in (aten.mul.Tensor, aten.mul.Scalar, operator.mul):
            expr = None if args[0] is None or args[1] is None else args[0] * args[1]
        elif t in (aten.add.Tensor, aten.add.Scalar, operator.add):
            alpha = _scalar(kw.get("alpha", 1))
            expr = None if None in args[:2] or alpha is None else args[0] + alpha * args[1]
        elif t in (aten.sub.Tensor, aten.sub.Scalar, operator.sub):
            alpha = _scalar(kw.get("alpha", 1))
            expr = None if None in args[:2] or alpha is None else args[0] - alpha * args[1]
        elif t in (aten.rsub.Tensor, aten.rsub.Scalar):
            alpha = _scalar(kw.get("alpha", 1))
            expr = None if None in args[:2] or alpha is None else args[1] - alpha * args[0]
        elif t in (aten.neg.default, operator.neg):
            expr = None if args[0] is None else -args[0]
        elif t is aten.addcmul.default:
            value = _scalar(kw.get("value", 1))
            expr = (
                None if None in args[:3] or value is None else args[0] + value * args[1] * args[2]
            )
        elif t in (aten.div.Tensor, aten.div.Scalar) and isinstance(node.args[1], (int, float)):
            expr = None if args[0] is None or node.args[1] == 0 else args[0] / args[1]
        if expr is None:
            # Opaque if pointwise and free of the watched symbols; else unreadable.
            if not is_pointwise(node):
                return None
            deps = [a for a in node.all_input_nodes]
            if any(env.get(d) is None or env[d].free_symbols & watched_syms for d in deps):
                return None
            s = sympy.Symbol(f"o{len(opaque)}")
            opaque[s] = node
            expr = s
        env[node] = expr
    return SymbolicGraph(inputs, outputs, opaque)


def equal(x: sympy.Expr, y: sympy.Expr) -> bool:
    return sympy.expand(x - y) == 0
