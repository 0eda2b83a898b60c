"""The examples the README points to run as a user runs them: each in a fresh process from the
repository root, checked by what it prints and its exit status (the context-parallel example at a
small size: 2 gloo processes on CPU, 3 steps)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import torch

from ssmscan.testing import tolerance

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str) -> str:
    """stdout of ``python examples/<name> args...``; fails with its output if it exits non-zero."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_quickstart():
    out = run_example("quickstart.py")
    errors = [float(e) for e in re.findall(r"max rel\. error vs float64 oracle ([0-9.e+-]+)", out)]
    assert len(errors) == 2, out  # selective_scan and linear_scan
    assert max(errors) <= tolerance(torch.float32), out
    assert "torch.compile(fullgraph=True, dynamic=True): matches eager" in out, out
    assert "ssmscan nodes ['ssmscan.selective_scan_fwd.default']" in out, out
    assert re.search(r"gradients: u, delta, A, B, C, D, z, delta_bias, initial_state", out), out


def test_train_context_parallel():
    out = run_example("train_context_parallel.py", "--steps", "3", "--length", "128")
    # the example raises (non-zero exit) if step 0 differs from the single-process step; the
    # line it prints says so too, with the errors against float32's tolerance
    check = re.search(
        r"loss .* \(rel ([0-9.e+-]+)\), worst parameter-gradient rel error ([0-9.e+-]+)", out
    )
    assert check is not None, out
    assert max(float(check.group(1)), float(check.group(2))) <= tolerance(torch.float32), out
    assert sorted(re.findall(r"^rank (\d): tokens", out, flags=re.M)) == ["0", "1"], out
    assert re.search(r"^step\s+2\s+loss", out, flags=re.M), out
