"""Graph passes over ``torch.export`` programs and FX graph modules; one pass per file.

Each pass changes the graph in place and returns a :class:`PassResult` (truthy iff it changed).
"""

from ._graph import Decision, PassResult
from .decompose_selective_scan import decompose_selective_scan
from .explain import Explanation, explain
from .lower_associative_scan import lower_associative_scan
from .lower_scan import lower_scan
from .pipelines import (
    LOOP_BACKEND_PIPELINE,
    LOOP_REALIZATION_PIPELINE,
    PARALLEL_REALIZATION_PIPELINE,
    TENSORRT_PIPELINE,
    run_pipeline,
)
from .tensorrt_ready import (
    BANNED_FACTORIES,
    TensorRTReadiness,
    check_tensorrt_ready,
    tensorrt_op_set,
)

__all__ = [
    "BANNED_FACTORIES",
    "LOOP_BACKEND_PIPELINE",
    "LOOP_REALIZATION_PIPELINE",
    "PARALLEL_REALIZATION_PIPELINE",
    "TENSORRT_PIPELINE",
    "Decision",
    "Explanation",
    "PassResult",
    "TensorRTReadiness",
    "check_tensorrt_ready",
    "decompose_selective_scan",
    "explain",
    "lower_associative_scan",
    "lower_scan",
    "run_pipeline",
    "tensorrt_op_set",
]
