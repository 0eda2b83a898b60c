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
    """``plan.split_applies``: 16 states and whole blocks of 8 channels per group anywhere;
    compiled also a static L that is a multiple of 16 and 16-byte aligned tensors
    (``triton_bwd_split._aligned``: eager pointers, or the storage offset of fake tensors under
    tracing); the launcher's ``plan_for`` reads both off the call."""
    import torch
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from ssmscan.ops.selective_scan import triton_bwd
    from ssmscan.ops.selective_scan.plan import H200, INTERPRETED, split_applies
    from ssmscan.ops.selective_scan.triton_bwd_split import _aligned

    assert split_applies(16, 64, 1, True, 512, True, H200)
    assert split_applies(12, 64, 2, True, 512, True, H200)  # N 12 -> 16 padded, 32 a group
    assert not split_applies(8, 64, 1, True, 512, True, H200)  # NP 8
    assert not split_applies(16, 24, 2, True, 512, True, H200)  # 12 channels a group
    assert not split_applies(16, 64, 1, True, 520, True, H200)  # L % 16 != 0 (layouts differ)
    assert split_applies(16, 64, 1, True, 520, True, INTERPRETED)  # ... fine interpreted
    assert not split_applies(16, 64, 1, True, 512, False, H200)  # a tensor off alignment
    assert not split_applies(16, 64, 1, False, 512, True, H200)  # Triton would not know L % 16
    x = torch.zeros(64)
    assert _aligned(x) and _aligned(x[4:]) and not _aligned(x[1:])
    with FakeTensorMode():
        f = torch.empty(64)
        assert _aligned(f) and _aligned(f[4:]) and not _aligned(f[2:])
    # what the launcher plans for a symbolic L (torch.compile(dynamic=True)): not static
    env = ShapeEnv()
    sym_L = env.create_symintnode(env.create_symbol(512, source=ConstantSource("L")), hint=512)
    u = torch.zeros(1, 64, 512)
    A, B = torch.zeros(64, 16), torch.zeros(1, 16, 512)

    class Sym:  # u's shape with the symbolic L
        shape = (1, 64, sym_L)
        device = torch.device("cuda")

    plan = triton_bwd.plan_for(Sym(), A, B, (u,), facts=H200)
    assert plan.main == "tile_rs"
