"""``explain(program)``: for every scan-like node, lowered or left, by which algorithm, and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.fx as fx
from torch._higher_order_ops.associative_scan import associative_scan_op
from torch._higher_order_ops.scan import scan_op

from ssmscan.scan import Algorithm

from . import _graph as G
from .decompose_selective_scan import explain_decompose, is_ssmscan_op
from .lower_associative_scan import explain_associative_scan
from .lower_scan import explain_scan


@dataclass(frozen=True)
class Explanation:
    """One :class:`Decision` per scan-like node; ``str()`` is a readable report."""

    decisions: tuple[G.Decision, ...]

    def __str__(self) -> str:
        if not self.decisions:
            return "no scan-like nodes"
        return "\n".join(str(d) for d in self.decisions)


def explain(program: Any, algorithm: Algorithm = "auto") -> Explanation:
    """Report every scan-like node of ``program`` without changing it.

    Nodes already lowered by an ssmscan pass are reported from their ``node.meta`` tag (lowered, the
    algorithm); remaining ssmscan ops (``selective_scan_fwd``, ``ssd_scan_fwd``, ``linear_scan_fwd``,
    ``selective_state_update``), ``associative_scan`` and ``scan`` nodes with what the passes would
    do and why (an ssmscan op: its parallel realization at a static length, else its loop); any other higher-order op as left, no pass handles it.

    Args:
        program: ``ExportedProgram`` or ``GraphModule``.
        algorithm: the algorithm the passes would be asked for.

    Returns:
        An :class:`Explanation`.
    """
    gm, _ = G.graph_module_of(program)
    decisions: list[G.Decision] = []
    seen_sources: set[str] = set()
    for node in gm.graph.nodes:
        tag = node.meta.get(G.LOWERING_META)
        if tag is not None:
            if tag["source"] not in seen_sources:
                seen_sources.add(tag["source"])
                reason = tag.get("reason", "replaced by plain aten ops (no higher-order op left)")
                decisions.append(
                    G.Decision(tag["source"], tag["op"], True, tag["algorithm"], reason)
                )
        elif is_ssmscan_op(node):
            decisions.append(_would(explain_decompose(node)))
        elif node.op == "call_function" and node.target is associative_scan_op:
            decisions.append(_would(explain_associative_scan(gm, node, algorithm)))
        elif node.op == "call_function" and node.target is scan_op:
            decisions.append(_would(explain_scan(gm, node, algorithm)))
        elif isinstance(node, fx.Node) and G.is_higher_order(node):
            decisions.append(
                G.Decision(
                    node.name, str(node.target), False, None, "no ssmscan pass lowers this op"
                )
            )
    return Explanation(tuple(decisions))


def _would(d: G.Decision) -> G.Decision:
    if not d.lowered:
        return d
    return G.Decision(
        d.node, d.op, False, d.algorithm, f"not lowered yet; the pass would: {d.reason}"
    )
