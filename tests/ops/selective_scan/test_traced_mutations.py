"""Torch's mutation analysis of every traced kernel launch (``mutation_check.py``, Note [traced
kernels' inline asm] in ``triton_bwd_lane``): no kernel of a selective-scan training step, nor
linear_scan's or selective_state_update's, is taken to write one of its op's inputs. A GPU is
not needed: the launches are recorded under the interpreter, the analysis reads the sm_90 TTIR."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

SCRIPT = os.path.join(os.path.dirname(__file__), "mutation_check.py")


@pytest.mark.triton
def test_no_traced_kernel_writes_an_op_input(tmp_path):
    path = str(tmp_path / "launches.pkl")
    env = dict(os.environ, TRITON_INTERPRET="1")
    cap = subprocess.run(
        [sys.executable, SCRIPT, "capture", path], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert cap.returncode == 0, cap.stdout + cap.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run(
        [sys.executable, SCRIPT, "analyze", path], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    # 37 launches over the configurations, and the negative control
    assert res.stdout.count(" ok\n") == 38, res.stdout
