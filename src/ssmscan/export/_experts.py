"""transformers' mixture-of-experts ops as plain aten for the exporters that cannot take them.

transformers' ``grouped_mm`` experts (``@use_experts_implementation``, the default of its MoE
models, e.g. GraniteMoeHybrid) count the tokens of each expert with ``torch.histc`` over the sorted
expert ids and multiply each expert's rows by its weights with ``torch.nn.functional.grouped_mm``;
traced by ``torch.export`` on float32 weights the product becomes the custom op
``transformers::grouped_mm_fallback``. Neither has a form in the ONNX exporter (torchlib's
``aten_histc`` refuses it), Torch-TensorRT's converter set or the Core ATen opset ExecuTorch needs.
:func:`decompose_experts` replaces each node by aten every one of them converts, computing the
same values:

* ``aten.histc(x, bins, min, max)`` with ``min < max`` (literal bounds): CPU ``histc``'s
  arithmetic (``trunc((x - min) * bins / (max - min))`` in ``x``'s dtype, ``max`` itself in the
  last bin, elements outside ``[min, max]`` and NaN not counted) followed by a comparison with the
  ``bins`` bin indices and a sum: O(numel * bins), ``bins`` being the (static, small) number of
  experts. ``min == max`` (bounds taken from the data) is left alone.
* ``transformers.grouped_mm_fallback(input (S, K), weight (G, K, N), offs (G,))``: row ``r`` is
  multiplied by ``weight[g]`` for the group ``g`` with ``offs[g-1] <= r < offs[g]`` (the number of
  ``offs`` at or below ``r``); rows at or past ``offs[-1]`` are zero, as in the fallback. Every
  row is multiplied by all ``G`` weights in one batched matmul and the row's own product
  gathered: ``G`` times the FLOPs of the grouped product and a ``(G, S, N)`` intermediate, for
  static shapes without data-dependent slicing (the number of experts must be static).

Nodes are traced anew with ``make_fx`` on their fake inputs inside the program's fake mode (symbolic
sizes keep their shape environment) and spliced in; a graph without these ops is not touched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from ssmscan.passes import _graph as G

__all__ = [
    "decompose_experts",
    "empty_like_as_zeros",
    "grouped_mm_dense",
    "histc_by_comparison",
    "lower_experts",
    "sort_as_topk",
    "split_as_slices",
]

_TAG = {"pass": "decompose_experts"}


def histc_by_comparison(x: torch.Tensor, bins: int, lo: float, hi: float) -> torch.Tensor:
    """``torch.histc(x, bins, lo, hi)`` (CPU semantics) from comparisons and a sum.

    Args:
        x: any shape, floating dtype.
        bins: number of bins (> 0).
        lo, hi: the range, ``lo < hi`` (rounded to ``x.dtype`` as ``histc`` does).

    Returns:
        ``(bins,)`` counts in ``x.dtype``.

    Example:
        >>> x = torch.tensor([0.0, 1.0, 1.0, 3.0, 4.0])
        >>> histc_by_comparison(x, 4, 0.0, 3.0)
        tensor([1., 2., 0., 1.])
        >>> torch.histc(x, 4, 0.0, 3.0)
        tensor([1., 2., 0., 1.])
    """
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating tensor (histc's input); got dtype {x.dtype}")
    if not isinstance(bins, int) or bins <= 0:
        raise ValueError(f"bins must be a positive int; got {bins!r}")
    ends = _histc_ends(lo, hi, x.dtype)
    if ends is None:
        raise ValueError(f"need lo < hi in {x.dtype}; got lo={lo}, hi={hi}")
    return _histc_counts(x, bins, *ends)


def _histc_ends(lo: float, hi: float, dtype: torch.dtype) -> tuple[float, float, float] | None:
    """histc's first and last bin edges and their difference, rounded to ``dtype`` as its
    ``linspace`` edges are; None unless ``lo < hi`` there. Not traceable (concrete tensors)."""
    lo_t = torch.tensor(lo, dtype=dtype)
    hi_t = torch.tensor(hi, dtype=dtype)
    if not bool(lo_t < hi_t):
        return None
    return float(lo_t), float(hi_t), float(hi_t - lo_t)


def _histc_counts(x: torch.Tensor, bins: int, lo: float, hi: float, span: float) -> torch.Tensor:
    flat = x.reshape(-1)
    # CPU kernel: pos = (int64)((elt - leftmost) * bins / (rightmost - leftmost)), in x's dtype;
    # the rightmost edge itself falls in the last bin
    pos = ((flat - lo) * bins / span).to(torch.int64).clamp(max=bins - 1)
    inside = (flat >= lo) & (flat <= hi)  # False for NaN
    index = torch.arange(bins, device=x.device).unsqueeze(1)  # (bins, 1)
    hits = (pos.unsqueeze(0) == index) & inside.unsqueeze(0)  # (bins, numel)
    return hits.sum(dim=1).to(x.dtype)


def grouped_mm_dense(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """transformers' ``grouped_mm_fallback(input, weight, offs)`` at static shapes.

    Args:
        input: ``(S, K)``, rows sorted by group.
        weight: ``(G, K, N)``, same dtype as ``input``.
        offs: ``(G,)`` int32 or int64, the cumulative end row of each group.

    Returns:
        ``(S, N)``: row ``r`` times ``weight[g]`` with ``offs[g-1] <= r < offs[g]``; zero for rows
        at or past ``offs[-1]``.

    Example:
        >>> x, w = torch.randn(5, 3), torch.randn(2, 3, 4)
        >>> offs = torch.tensor([2, 4], dtype=torch.int32)
        >>> out = grouped_mm_dense(x, w, offs)
        >>> torch.allclose(out[:2], x[:2] @ w[0]) and torch.allclose(out[2:4], x[2:4] @ w[1])
        True
        >>> bool((out[4] == 0).all())
        True
    """
    if input.dim() != 2 or weight.dim() != 3 or offs.dim() != 1:
        raise ValueError(
            f"expected input (S, K), weight (G, K, N), offs (G,); got input "
            f"{tuple(input.shape)}, weight {tuple(weight.shape)}, offs {tuple(offs.shape)}"
        )
    groups = weight.shape[0]
    rows = torch.arange(input.shape[0], device=input.device)  # (S,)
    group = (offs.to(torch.int64).unsqueeze(0) <= rows.unsqueeze(1)).sum(dim=1)  # (S,) in [0, G]
    every = torch.bmm(input.unsqueeze(0).expand(groups, -1, -1), weight)  # (G, S, N)
    index = group.clamp(max=groups - 1).view(1, -1, 1).expand(1, -1, every.shape[2])
    own = every.gather(0, index).squeeze(0)  # (S, N)
    return torch.where((group < groups).unsqueeze(1), own, 0.0)


def _grouped_mm_fallback() -> Any:
    ns = getattr(torch.ops, "transformers", None)
    op = getattr(ns, "grouped_mm_fallback", None) if ns is not None else None
    return getattr(op, "default", None) if op is not None else None


def decompose_experts(program: Any) -> G.PassResult:
    """``aten.histc`` (literal bounds) and ``transformers.grouped_mm_fallback`` -> plain aten.

    Args:
        program: a ``torch.export.ExportedProgram`` or ``fx.GraphModule``, changed in place.

    Returns:
        A :class:`~ssmscan.passes.PassResult`: changed, and one decision per node considered.

    Example:
        >>> class Counts(torch.nn.Module):
        ...     def forward(self, ids):
        ...         return torch.histc(ids.float(), bins=4, min=0, max=3)
        >>> ep = torch.export.export(Counts(), (torch.tensor([0, 3, 3, 1]),))
        >>> bool(decompose_experts(ep))
        True
        >>> any(n.target is torch.ops.aten.histc.default for n in ep.graph.nodes)
        False
        >>> ep.module()(torch.tensor([2, 2, 0, 1]))
        tensor([1., 1., 2., 0.])
    """
    gm, ep = G.graph_module_of(program)
    grouped = _grouped_mm_fallback()
    decisions: list[G.Decision] = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is torch.ops.aten.histc.default:
            decisions.append(_histc(gm, node))
        elif grouped is not None and node.target is grouped:
            decisions.append(_grouped_mm(gm, node))
    changed = any(d.lowered for d in decisions)
    if changed:
        G.finish(gm, ep)
    return G.PassResult(changed, tuple(decisions))


def _histc(gm: fx.GraphModule, node: fx.Node) -> G.Decision:
    schema = ("bins", "min", "max")
    given = dict(zip(schema, node.args[1:], strict=False)) | dict(node.kwargs)
    bins, lo, hi = given.get("bins", 100), given.get("min", 0), given.get("max", 0)
    x = node.args[0]

    def left(reason: str) -> G.Decision:
        return G.Decision(node.name, "aten.histc", False, None, reason)

    if not isinstance(x, fx.Node) or not isinstance(x.meta.get("val"), torch.Tensor):
        return left("input without a fake value")
    if not x.meta["val"].is_floating_point():
        return left(f"input of dtype {x.meta['val'].dtype} (histc takes floating input)")
    if not (
        isinstance(bins, int) and isinstance(lo, (int, float)) and isinstance(hi, (int, float))
    ):
        return left("bins, min or max not a literal")
    ends = _histc_ends(float(lo), float(hi), x.meta["val"].dtype)
    if ends is None:
        return left(f"min={lo} >= max={hi}: the range comes from the data")
    _splice(gm, node, lambda t: _histc_counts(t, bins, *ends), [x])
    return G.Decision(
        node.name, "aten.histc", True, "comparison-sum", f"{bins} bins over [{lo}, {hi}]"
    )


def _grouped_mm(gm: fx.GraphModule, node: fx.Node) -> G.Decision:
    given = [*node.args, *(node.kwargs[k] for k in ("input", "weight", "offs") if k in node.kwargs)]
    args = [a for a in given if isinstance(a, fx.Node)]

    def left(reason: str) -> G.Decision:
        return G.Decision(node.name, "transformers.grouped_mm_fallback", False, None, reason)

    if len(given) != 3 or len(args) != 3:
        return left("arguments not three graph values")
    if not all(isinstance(a.meta.get("val"), torch.Tensor) for a in args):
        return left("inputs without fake values")
    groups = args[1].meta["val"].shape[0]
    if not isinstance(groups, int):
        return left("a symbolic number of experts (the dense form needs it static)")
    _splice(gm, node, grouped_mm_dense, args)
    return G.Decision(
        node.name, "transformers.grouped_mm_fallback", True, "dense-gather", f"{groups} experts"
    )


def _splice(
    gm: fx.GraphModule, node: fx.Node, fn: Callable[..., torch.Tensor], inputs: list[fx.Node]
) -> None:
    """Replace the single-output ``node`` by ``fn(*inputs)`` traced to aten on the fake values."""
    traced = G.trace_on_fakes(fn, [i.meta["val"] for i in inputs], no_grad=True)
    G.insert_traced(gm, node, traced, inputs, _TAG, G.PROVENANCE, f"decomposing {node.target}")


def empty_like_as_zeros(program: Any) -> G.PassResult:
    """``aten.empty_like(x, ...)`` -> ``aten.zeros_like(x, ...)``: zeros are one of the values an
    uninitialized tensor may hold, so every reader sees what it may see of ``empty_like``.
    ExecuTorch takes neither form ``run_decompositions`` gives ``empty_like``: ``empty_permuted``
    is not Core ATen, and ``empty.memory_format`` of a symbolic size is specialized to the
    example's size by ``to_edge``; ``zeros_like`` becomes ``full_like`` and stays dynamic.
    transformers' ``grouped_mm`` experts allocate their inverse permutation with ``empty_like``.

    Args:
        program: a ``torch.export.ExportedProgram`` or ``fx.GraphModule``, changed in place.

    Returns:
        A :class:`~ssmscan.passes.PassResult`: changed, and one decision per ``empty_like``.

    Example:
        >>> class Inverse(torch.nn.Module):
        ...     def forward(self, perm):
        ...         inv = torch.empty_like(perm)
        ...         inv[perm] = torch.arange(perm.shape[0])
        ...         return inv
        >>> ep = torch.export.export(Inverse(), (torch.tensor([2, 0, 1]),))
        >>> bool(empty_like_as_zeros(ep))
        True
        >>> ep.module()(torch.tensor([2, 0, 1]))
        tensor([1, 2, 0])
    """
    gm, ep = G.graph_module_of(program)
    decisions: list[G.Decision] = []
    for node in gm.graph.find_nodes(op="call_function", target=torch.ops.aten.empty_like.default):
        node.target = torch.ops.aten.zeros_like.default
        node.meta[G.LOWERING_META] = {"pass": "empty_like_as_zeros"}
        decisions.append(G.Decision(node.name, "aten.empty_like", True, "zeros_like", "as zeros"))
    changed = bool(decisions)
    if changed:
        G.finish(gm, ep)
    return G.PassResult(changed, tuple(decisions))


def sort_as_topk(program: Any) -> G.PassResult:
    """``aten.sort(x, dim, descending)`` -> ``aten.topk(x, x.shape[dim], dim, descending,
    sorted=True)``: the same sorted values and a permutation that sorts ``x`` (an unstable sort
    promises no order among equal values; ``sort(stable=True)`` is left alone). ExecuTorch's
    portable kernels have ``topk`` but no ``sort``; transformers' ``grouped_mm`` experts sort
    their expert ids, and what they compute does not depend on the order among equal ids (each
    row is multiplied on its own and put back by the inverse permutation).

    Args:
        program: a ``torch.export.ExportedProgram`` or ``fx.GraphModule``, changed in place.

    Returns:
        A :class:`~ssmscan.passes.PassResult`: changed, and one decision per ``sort``.

    Example:
        >>> class Sort(torch.nn.Module):
        ...     def forward(self, x):
        ...         return tuple(torch.sort(x, descending=True))
        >>> ep = torch.export.export(Sort(), (torch.tensor([3, 1, 2]),))
        >>> bool(sort_as_topk(ep))
        True
        >>> ep.module()(torch.tensor([5, 9, 7]))
        (tensor([9, 7, 5]), tensor([1, 2, 0]))
    """
    gm, ep = G.graph_module_of(program)
    decisions: list[G.Decision] = []
    for node in list(gm.graph.find_nodes(op="call_function", target=torch.ops.aten.sort.default)):
        given = dict(zip(("self", "dim", "descending"), node.args, strict=False)) | node.kwargs
        x, dim, descending = given["self"], given.get("dim", -1), given.get("descending", False)
        if not isinstance(x, fx.Node) or not isinstance(x.meta.get("val"), torch.Tensor):
            decisions.append(G.Decision(node.name, "aten.sort", False, None, "no fake input"))
            continue
        if G.output_users(node, 2) is None:
            decisions.append(
                G.Decision(node.name, "aten.sort", False, None, "outputs not read by getitem")
            )
            continue

        G.splice(gm, node, _topk_sort(int(dim), bool(descending)), [x], {"pass": "sort_as_topk"})
        decisions.append(G.Decision(node.name, "aten.sort", True, "topk", "k = the sorted size"))
    changed = any(d.lowered for d in decisions)
    if changed:
        G.finish(gm, ep)
    return G.PassResult(changed, tuple(decisions))


def split_as_slices(program: Any) -> G.PassResult:
    """``aten.chunk`` / ``split.Tensor`` / ``split_with_sizes`` into pieces of static size whose
    leading dimension is symbolic, read through ``getitem`` -> one ``aten.slice.Tensor`` per
    piece read: the same views.

    ExecuTorch's argument validator (``to_edge``, executorch 1.5.1) takes the length of a
    ``Tensor[]`` result from its first tensor's leading dimension; where that dimension is
    symbolic (the token rows of transformers' experts, split into gate and up), the check
    specializes it to the example's size and the program loses its dynamic length.

    Args:
        program: a ``torch.export.ExportedProgram`` or ``fx.GraphModule``, changed in place.

    Returns:
        A :class:`~ssmscan.passes.PassResult`: changed, and one decision per split considered.

    Example:
        >>> class Gate(torch.nn.Module):
        ...     def forward(self, x):
        ...         gate, up = x.chunk(2, dim=-1)
        ...         return gate * up
        >>> rows = torch.export.Dim("rows")
        >>> ep = torch.export.export(Gate(), (torch.randn(3, 4),), dynamic_shapes=({0: rows},))
        >>> bool(split_as_slices(ep))
        True
        >>> x = torch.randn(3, 4)
        >>> torch.equal(ep.module()(x), x[:, :2] * x[:, 2:])
        True
    """
    gm, ep = G.graph_module_of(program)
    decisions: list[G.Decision] = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _SPLITS:
            continue
        dim = _split_dim(node)
        vals = node.meta.get("val")
        users = G.output_users(node, len(vals)) if isinstance(vals, (list, tuple)) else None
        x = node.args[0]

        def left(reason: str, node: fx.Node = node) -> G.Decision:
            return G.Decision(node.name, str(node.target), False, None, reason)

        if users is None or not isinstance(x, fx.Node) or not isinstance(dim, int):
            decisions.append(left("outputs not read by getitem, or no static dim"))
            continue
        sizes = [v.shape[dim] for v in vals]
        if not all(isinstance(n, int) for n in sizes):
            decisions.append(left("pieces of symbolic size"))
            continue
        if not vals or not vals[0].dim() or isinstance(vals[0].shape[0], int):
            decisions.append(left("static leading dimension: the validator reads it as is"))
            continue
        start = 0
        for size, us in zip(sizes, users, strict=True):
            for u in us:
                with gm.graph.inserting_before(u):
                    piece = gm.graph.call_function(
                        torch.ops.aten.slice.Tensor, (x, dim, start, start + size)
                    )
                piece.meta.update(u.meta)
                piece.meta[G.LOWERING_META] = {"pass": "split_as_slices"}
                u.replace_all_uses_with(piece)
                gm.graph.erase_node(u)
            start += size
        gm.graph.erase_node(node)
        decisions.append(G.Decision(node.name, str(node.target), True, "slice", f"{sizes}"))
    changed = any(d.lowered for d in decisions)
    if changed:
        G.finish(gm, ep)
    return G.PassResult(changed, tuple(decisions))


_SPLITS = (
    torch.ops.aten.chunk.default,
    torch.ops.aten.split.Tensor,
    torch.ops.aten.split_with_sizes.default,
)


def _split_dim(node: fx.Node) -> int | None:
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    x = node.args[0]
    if not isinstance(dim, int) or not isinstance(x, fx.Node):
        return None
    val = x.meta.get("val")
    return dim % val.dim() if isinstance(val, torch.Tensor) else None


def _topk_sort(dim: int, largest: bool) -> Callable[[torch.Tensor], Any]:
    def fn(t: torch.Tensor) -> Any:
        return tuple(torch.topk(t, t.shape[dim], dim, largest=largest, sorted=True))

    return fn


def lower_experts(ep: torch.export.ExportedProgram, report: Any, core_aten: bool = False) -> None:
    """:func:`decompose_experts` on ``ep`` as the stage ``"experts"`` of ``report`` (an
    ``ExportReport``), the decisions added to the report's notes. ``core_aten`` (for ExecuTorch:
    the Core ATen opset, its portable kernels and its argument validator) adds
    :func:`empty_like_as_zeros`, :func:`sort_as_topk` and :func:`split_as_slices`."""
    with report.stage("experts"), torch.no_grad():
        results = [decompose_experts(ep)]
        if core_aten:
            results += [empty_like_as_zeros(ep), sort_as_topk(ep), split_as_slices(ep)]
    report.notes.extend(str(d) for r in results for d in r.decisions)
