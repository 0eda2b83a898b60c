"""The layouts the split backward's shuffles rely on (Note [selective scan backward split]):
compiled for sm_90 without a GPU by ``split_layout_check.py``, in a process without
TRITON_INTERPRET (the conftest sets it for this one)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")


@pytest.mark.triton
@pytest.mark.slow
def test_split_backward_shuffle_layouts():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = os.path.join(os.path.dirname(__file__), "split_layout_check.py")
    res = subprocess.run(
        [sys.executable, script], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert res.stdout.count(" ok") == 8, res.stdout
