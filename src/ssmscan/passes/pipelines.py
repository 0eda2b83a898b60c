"""Pass pipelines: immutable, ordered tuples of passes, each ``(program) -> PassResult``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _graph as G
from .lower_associative_scan import lower_associative_scan
from .lower_scan import lower_scan

Pass = Callable[[Any], G.PassResult]

# For backends that convert only aten ops and run no loops (Torch-TensorRT).
TENSORRT_PIPELINE: tuple[Pass, ...] = (lower_associative_scan, lower_scan)
# For backends that run loops (ONNX Scan, AOTInductor CPU): keep `scan`, lower only the HOP they lack.
LOOP_BACKEND_PIPELINE: tuple[Pass, ...] = (lower_associative_scan,)


def run_pipeline(program: Any, pipeline: tuple[Pass, ...]) -> G.PassResult:
    """Run each pass in order; changed if any pass changed the graph; decisions concatenated."""
    changed = False
    decisions: list[G.Decision] = []
    for p in pipeline:
        r = p(program)
        changed |= r.changed
        decisions.extend(r.decisions)
    return G.PassResult(changed, tuple(decisions))
