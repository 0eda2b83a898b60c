"""Lower ``torch.ops.higher_order.associative_scan`` to a parallel scan in plain aten ops."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.fx as fx
from torch._higher_order_ops.associative_scan import associative_scan_op

from ssmscan.scan import DEFAULT_CHUNK_SIZE, Algorithm, affine_scan, choose_algorithm, scan_leaves
from ssmscan.scan import _aten as T

from . import _graph as G
from ._symbolic import equal, is_pointwise, read_polynomial

OP_NAME = "associative_scan"
# A dynamic length is padded up to its declared bound; past this the graph would be mostly padding.
MAX_PADDED_LENGTH = 1 << 16


@dataclass(frozen=True)
class _Plan:
    decision: G.Decision
    fn: Any = None
    inputs: tuple[fx.Node, ...] = ()


def lower_associative_scan(
    program: Any,
    algorithm: Algorithm = "auto",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    max_padded_length: int = MAX_PADDED_LENGTH,
) -> G.PassResult:
    """``higher_order.associative_scan`` in, slice/cat/pointwise aten parallel scan out.

    Affine combines ``(a_l a_r, a_r b_l + b_r)`` (any operand order, commuted, broadcast, ``addcmul``,
    casts, further leaves sharing ``a``) get the affine scans of :mod:`ssmscan.scan.affine`; any other
    pointwise combine is inlined into the generic scan. A dynamic length with a declared upper bound is
    padded to that bound (no guard added); other nodes are left untouched, with the reason recorded.

    Args:
        program: a ``torch.export.ExportedProgram`` or ``torch.fx.GraphModule`` (changed in place).
        algorithm: "auto", "hillis_steele", "blelloch" or "chunked".
        chunk_size: chunk length of the two-level scan.
        max_padded_length: largest bound a dynamic length is padded up to.

    Returns:
        A :class:`PassResult`; truthy iff the graph changed.
    """
    gm, program_ = G.graph_module_of(program)
    decisions = []
    changed = False
    for node in G.nodes_calling(gm, associative_scan_op):
        plan = _plan(gm, node, algorithm, chunk_size, max_padded_length)
        decisions.append(plan.decision)
        if plan.fn is None:
            continue
        tag = {"source": node.name, "op": OP_NAME, "algorithm": str(plan.decision.algorithm)}
        G.splice(gm, node, plan.fn, plan.inputs, tag)
        changed = True
    if changed:
        G.finish(gm, program_)
    return G.PassResult(changed, tuple(decisions))


def explain_associative_scan(
    gm: fx.GraphModule,
    node: fx.Node,
    algorithm: Algorithm = "auto",
    max_padded_length: int = MAX_PADDED_LENGTH,
) -> G.Decision:
    """What :func:`lower_associative_scan` would do with ``node``, without changing anything."""
    return _plan(gm, node, algorithm, DEFAULT_CHUNK_SIZE, max_padded_length).decision


def _plan(
    gm: fx.GraphModule, node: fx.Node, algorithm: Algorithm, chunk_size: int, max_len: int
) -> _Plan:
    def left(reason: str) -> _Plan:
        return _Plan(G.Decision(node.name, OP_NAME, False, None, reason))

    if len(node.args) != 3 or node.kwargs:
        return left(f"unexpected signature {len(node.args)} args, kwargs {sorted(node.kwargs)}")
    combine_node, xs, extras = node.args
    combine = G.submodule(gm, combine_node) if isinstance(combine_node, fx.Node) else None
    if combine is None:
        return left("combine function is not a graph module attribute")
    xs = list(cast(Sequence[fx.node.Argument], xs))
    extras = list(cast(Sequence[fx.node.Argument], extras))
    if not all(isinstance(x, fx.Node) and "val" in x.meta for x in xs + extras):
        return left("inputs carry no fake values (node.meta['val']); trace with torch.export")
    inputs = cast(list[fx.Node], xs + extras)  # all checked to be nodes just above
    if G.output_users(node, len(xs)) is None:
        return left("outputs are used other than through getitem")
    for n in combine.graph.nodes:
        if n.op == "get_attr":
            return left(f"combine reads a constant ({n.target}); only pointwise graphs are lowered")
        if n.op == "call_function" and not is_pointwise(n):
            return left(f"combine is not pointwise: {n.target} is not elementwise")
    k = len(xs)
    vals = [x.meta["val"] for x in inputs[:k]]
    length = vals[0].shape[0]
    note = ""
    static_len: int
    if isinstance(length, int):
        static_len = length
    else:
        bound = _upper_bound(length)
        if bound is None:
            return left(f"dynamic length {length} has no finite upper bound; declare Dim(max=...)")
        if bound > max_len:
            return left(f"dynamic length {length} bounded by {bound} > max_padded_length={max_len}")
        static_len = bound
        note = f"; dynamic length {length} padded to its bound {bound}"
    algo = cast(Algorithm, choose_algorithm(static_len, algorithm))  # always one of ALGORITHMS
    ia = _affine_index(combine, k)
    users = G.output_users(node, k)
    assert users is not None
    read = [bool(u) for u in users]
    dtypes = [v.dtype for v in vals]
    if ia is not None and all(v.dim() == vals[ia].dim() for v in vals):
        body = _affine_body(ia, k, read, algo, chunk_size)
        reason = f"affine combine (a = leaf {ia}) as the affine {algo} scan{note}"
    else:
        body = _generic_body(combine, k, algo, chunk_size)
        reason = f"pointwise combine inlined into the generic {algo} scan{note}"

    def fn(*args: torch.Tensor) -> list[torch.Tensor | None]:
        leaves, rest = list(args[:k]), list(args[k:])
        n = T.length(leaves[0], 0)
        if not isinstance(n, int):
            leaves = [T.pad_end(x, 0, static_len - n, 0) for x in leaves]
        ys = body(leaves, rest)
        out: list[torch.Tensor | None] = []
        for y, dtype, r in zip(ys, dtypes, read, strict=True):
            if y is None or not r:
                out.append(None)
                continue
            if not isinstance(n, int):
                y = T.narrow(y, 0, 0, n)
            out.append(y if y.dtype == dtype else y.to(dtype))
        return out

    return _Plan(G.Decision(node.name, OP_NAME, True, algo, reason), fn, tuple(inputs))


def _upper_bound(length: torch.SymInt) -> int | None:
    shape_env = length.node.shape_env
    upper = shape_env.bound_sympy(length.node.expr).upper
    try:
        return int(upper) if upper.is_finite else None
    except (TypeError, AttributeError):
        return None


def _affine_index(combine: fx.GraphModule, k: int) -> int | None:
    """Index of the decay leaf if the combine is ``(a_l a_r, a_r x_l + x_r for every other x)``."""
    if k < 2:
        return None
    sym = read_polynomial(combine, watched=set(range(2 * k)))
    if sym is None or len(sym.outputs) != k or len(sym.inputs) < 2 * k:
        return None
    lhs, rhs, out = sym.inputs[:k], sym.inputs[k : 2 * k], sym.outputs
    for ia in range(k):
        if not equal(out[ia], lhs[ia] * rhs[ia]):
            continue
        if all(equal(out[j], rhs[ia] * lhs[j] + rhs[j]) for j in range(k) if j != ia):
            return ia
    return None


def _affine_body(ia: int, k: int, read: list[bool], algo: Algorithm, chunk_size: int) -> Any:
    def body(leaves: list[torch.Tensor], _extras: list[torch.Tensor]) -> list[torch.Tensor | None]:
        a = leaves[ia]
        ys: list[torch.Tensor | None] = [None] * k
        bs = [j for j in range(k) if j != ia]
        for j in bs:  # the first state also yields the running product A when that is read
            if j == bs[0] and read[ia]:
                ys[ia], ys[j] = affine_scan(
                    a, leaves[j], 0, algorithm=algo, chunk_size=chunk_size, return_a=True
                )
            elif read[j]:
                ys[j] = affine_scan(a, leaves[j], 0, algorithm=algo, chunk_size=chunk_size)
        return ys

    return body


def _generic_body(combine: fx.GraphModule, k: int, algo: Algorithm, chunk_size: int) -> Any:
    def body(leaves: list[torch.Tensor], extras: list[torch.Tensor]) -> list[torch.Tensor]:
        def step(lhs: list[torch.Tensor], rhs: list[torch.Tensor]) -> list[torch.Tensor]:
            out = fx.Interpreter(combine).run(*lhs, *rhs, *extras)
            return list(out) if isinstance(out, (list, tuple)) else [out]

        return scan_leaves(step, leaves, 0, False, algo, chunk_size)

    return body
