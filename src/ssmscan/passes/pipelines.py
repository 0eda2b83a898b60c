"""Pass pipelines: immutable, ordered tuples of passes, each ``(program) -> PassResult``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _graph as G
from .decompose_selective_scan import decompose_selective_scan
from .lower_associative_scan import lower_associative_scan
from .lower_scan import lower_scan

Pass = Callable[[Any], G.PassResult]


def decompose_to_parallel(program: Any) -> G.PassResult:
    """ssmscan ops in, their parallel aten realizations out (static lengths; the rest left)."""
    return decompose_selective_scan(program, "parallel")


def decompose_to_loop(program: Any) -> G.PassResult:
    """ssmscan ops in, their ``higher_order.scan`` loop realizations out (any length)."""
    return decompose_selective_scan(program, "loop")


# For backends that convert only aten ops and run no loops (Torch-TensorRT).
TENSORRT_PIPELINE: tuple[Pass, ...] = (lower_associative_scan, lower_scan)
# For backends that run loops (ONNX Scan, AOTInductor CPU): keep `scan`, lower only the HOP they lack.
LOOP_BACKEND_PIPELINE: tuple[Pass, ...] = (lower_associative_scan,)
# The same with ssmscan's own ops (selective_scan, ssd_scan, linear_scan, state updates) replaced
# first: a program that calls ssmscan ops comes out with none left.
PARALLEL_REALIZATION_PIPELINE: tuple[Pass, ...] = (decompose_to_parallel, *TENSORRT_PIPELINE)
LOOP_REALIZATION_PIPELINE: tuple[Pass, ...] = (decompose_to_loop, *LOOP_BACKEND_PIPELINE)


def run_pipeline(program: Any, pipeline: tuple[Pass, ...]) -> G.PassResult:
    """Run each pass in order; changed if any pass changed the graph; decisions concatenated."""
    changed = False
    decisions: list[G.Decision] = []
    for p in pipeline:
        r = p(program)
        changed |= r.changed
        decisions.extend(r.decisions)
    return G.PassResult(changed, tuple(decisions))
