"""Importing ssmscan is cheap and touches no GPU."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout


def test_import_does_not_initialise_cuda_or_load_kernels():
    # (defining a torch.library.triton_op imports triton when it is installed; that is torch's
    # doing and initialises nothing, so it is not asserted on here)
    out = _run(
        "import sys, torch, ssmscan\n"
        "print(torch.cuda.is_initialized(), any(m.startswith('ssmscan._cpu_kernels') for m in sys.modules))"
    )
    assert out.split() == ["False", "False"]


def test_import_adds_under_a_second_to_torch():
    def best(code: str) -> float:
        times = []
        for _ in range(3):
            t = time.perf_counter()
            _run(code)
            times.append(time.perf_counter() - t)
        return min(times)

    extra = best("import torch, ssmscan") - best("import torch")
    assert extra < 1.0, f"import ssmscan adds {extra:.2f} s"


@pytest.mark.parametrize(
    "name",
    [
        "ssmscan.selective_scan_fwd",
        "ssmscan.selective_scan_bwd",
        "ssmscan.linear_scan_fwd",
        "ssmscan.linear_scan_bwd",
    ],
)
def test_ops_registered_after_import(name):
    import torch

    import ssmscan  # noqa: F401

    ns, op = name.split(".")
    assert hasattr(getattr(torch.ops, ns), op)
