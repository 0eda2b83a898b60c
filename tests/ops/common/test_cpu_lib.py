"""``ssmscan.ops.common.cpu_lib``: the CPU kernels' thread pool works in multiprocessing children.

A child made by ``fork`` inherits the parent's pool object but none of its threads; it must start
its own (module note of ``cpu_lib``). Each case runs ``fork_worker.py`` in a fresh interpreter
(two torch threads, the pool created by a first call in the parent) under a timeout, so a hung
child fails the test instead of the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ssmscan.testing import tolerance

WORKER = Path(__file__).with_name("fork_worker.py")
TIMEOUT_S = 150  # the worker gives its child 60 s; a hang anywhere else fails here
EXPECTED = {
    "linear_scan": {"h", "da", "db"},
    "selective_scan": {"out", "du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias"},
}


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_child_process_computes_correct_results(tmp_path: Path, method: str) -> None:
    out = tmp_path / "report.json"
    try:
        proc = subprocess.run(
            [sys.executable, str(WORKER), method, str(out)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the {method} worker did not finish in {TIMEOUT_S} s")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert "hung" not in report, report["hung"]
    assert report.pop("exitcode") == 0
    tol = tolerance(torch.float32)
    for op, names in EXPECTED.items():
        errors = report[op]
        assert set(errors) == names, f"{op}: compared {sorted(errors)}"
        bad = {k: e for k, e in errors.items() if not e <= tol}
        assert not bad, f"{op} in a {method} child: relative errors above {tol:.0e}: {bad}"
