"""Test support shared by ssmscan's tests and benchmarks: tolerances per dtype, realistic input
factories and comparison helpers."""

from ssmscan.testing.compare import assert_close_to_reference, rel_error
from ssmscan.testing.inputs import make_linear_scan_inputs, make_selective_scan_inputs
from ssmscan.testing.tolerances import TOLERANCES, tolerance

__all__ = [
    "TOLERANCES",
    "assert_close_to_reference",
    "make_linear_scan_inputs",
    "make_selective_scan_inputs",
    "rel_error",
    "tolerance",
]
