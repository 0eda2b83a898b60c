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


def test_split_applies_only_where_the_layouts_were_checked():
    """``triton_bwd_split.applies``: 16 states and whole blocks of 8 channels per group anywhere;
    on the GPU also a concrete L that is a multiple of 16 and 16-byte aligned tensors (eager
    pointers, or the storage offset of fake tensors under tracing)."""
    import torch
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from ssmscan.ops.selective_scan.triton_bwd_split import applies

    x = torch.zeros(64)
    assert applies(16, 64, 1, 512, (x,), True)
    assert applies(12, 64, 2, 512, (x,), True)  # N 12 -> 16 padded states, 32 channels a group
    assert not applies(8, 64, 1, 512, (x,), True)  # NP 8
    assert not applies(16, 24, 2, 512, (x,), True)  # 12 channels a group
    assert not applies(16, 64, 1, 520, (x,), True)  # L % 16 != 0 (the layouts differ)
    assert applies(16, 64, 1, 520, (x,), False)  # ... fine under the interpreter
    assert not applies(16, 64, 1, 512, (x, x[1:]), True)  # a tensor 4 bytes off alignment
    assert applies(16, 64, 1, 512, (x[4:], None), True)
    env = ShapeEnv()
    sym_L = env.create_symintnode(env.create_symbol(512, source=ConstantSource("L")), hint=512)
    assert not applies(16, 64, 1, sym_L, (x,), True)  # Triton would not know L % 16 == 0
    with FakeTensorMode():
        f = torch.empty(64)
        assert applies(16, 64, 1, 512, (f, f[4:]), True)
        assert not applies(16, 64, 1, 512, (f[2:],), True)
