"""Is a graph ready for Torch-TensorRT? No HOP, no banned constant factory, every op convertible."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch
import torch.fx as fx

from . import _graph as G

# Constant factories that appear after run_decompositions, have no converter, and would silently
# fall back to PyTorch (or materialise an identity pad); a lowering must never emit them.
BANNED_FACTORIES: frozenset[str] = frozenset(
    {
        "aten.ones_like",
        "aten.zeros_like",
        "aten.empty_like",
        "aten.full_like",
        "aten.rand_like",
        "aten.randn_like",
        "aten.new_ones",
        "aten.new_zeros",
        "aten.new_empty",
        "aten.new_full",
    }
)


@dataclass(frozen=True)
class TensorRTReadiness:
    """``ready`` iff all three lists are empty; each lists offending node targets, sorted."""

    higher_order: tuple[str, ...]
    banned_factories: tuple[str, ...]
    unsupported: tuple[str, ...]

    @property
    def ready(self) -> bool:
        return not (self.higher_order or self.banned_factories or self.unsupported)

    def __bool__(self) -> bool:
        return self.ready


@functools.cache
def tensorrt_op_set() -> tuple[frozenset[str], frozenset[str], dict[str, str]]:
    """(converted ops, ops Torch-TensorRT decomposes first, provenance) from the committed data."""
    text = resources.files("ssmscan.passes").joinpath("data/tensorrt_converters.json").read_text()
    data = json.loads(text)
    return frozenset(data["converters"]), frozenset(data["decompositions"]), data["provenance"]


def target_name(target: object) -> str:
    """``aten.mul.Tensor`` for ops, ``_operator.add`` for Python callables (as in the data file)."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}.{getattr(target, '__name__', repr(target))}"


def _packet(name: str) -> str:
    return ".".join(name.split(".")[:2]) if name.startswith(("aten.", "prims.")) else name


def check_tensorrt_ready(program: Any, allow_decomposed: bool = True) -> TensorRTReadiness:
    """Check every call in ``program`` against Torch-TensorRT 2.13's converter registry.

    Args:
        program: ``ExportedProgram`` or ``GraphModule``; check after ``run_decompositions()``.
        allow_decomposed: also accept ops Torch-TensorRT decomposes into converted ones first.

    Returns:
        A :class:`TensorRTReadiness`, truthy iff ready.
    """
    gm, _ = G.graph_module_of(program)
    converters, decomposed, _ = tensorrt_op_set()
    accepted = converters | decomposed if allow_decomposed else converters
    hops, banned, unsupported = set(), set(), set()
    for node in _calls(gm):
        name = target_name(node.target)
        if G.is_higher_order(node):
            hops.add(name)
        elif _packet(name) in BANNED_FACTORIES:
            banned.add(name)
        elif name not in accepted and _packet(name) not in converters:
            unsupported.add(name)
    return TensorRTReadiness(tuple(sorted(hops)), tuple(sorted(banned)), tuple(sorted(unsupported)))


def _calls(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function"]
