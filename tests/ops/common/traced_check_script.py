"""Note [traced layout checks], without a GPU: the launches a traced forward / backward would make
(captured from the launchers with CPU tensors standing in for the traced ones, nothing run) are
compiled for sm_90 by ``triton_launch.traced_check`` and pass their layout checks; a failing
check raises on that specialization, again from the cache without compiling; an unaligned
tensor is another specialization. Run by ``test_triton_launch.py`` in a process without
TRITON_INTERPRET. Prints "... ok" lines; exit status 1 on a failure."""

from __future__ import annotations

import os
import sys
import warnings

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("run without TRITON_INTERPRET=1: this compiles for sm_90")

import torch
import triton

from ssmscan.ops.common import triton_launch
from ssmscan.ops.selective_scan import triton_bwd, triton_fwd
from ssmscan.ops.selective_scan.layout_check import LaneLayoutError
from ssmscan.ops.selective_scan.plan import H200
from ssmscan.ops.selective_scan.shapes import empty_backward_outputs, empty_forward_outputs
from ssmscan.testing import make_selective_scan_inputs
from ssmscan.testing.triton_sm90 import SM90

NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")


def captured(dtype: torch.dtype) -> list:
    """(launcher, grid, args, kwargs) of every launch of a forward and a backward, as traced, by
    the plans an H200 makes (inline PTX, the lane kernels with their layout checks; the CPU
    stand-ins' own device would plan the interpreter's portable code, which has no check)."""
    seen = []

    def spy(self, grid, *args, **kwargs):
        like = triton_launch._first_tensor(args, kwargs)
        args, kwargs = self.traced_args(args, kwargs, like)
        seen.append((self, grid, args, kwargs))

    real = triton_launch._Launcher._launch
    triton_launch._Launcher._launch = spy
    try:
        kw = make_selective_scan_inputs(2, 64, 1024, 16, dtype=dtype, has_initial_state=True)
        args = [kw[k] for k in NAMES]
        u, _delta, A, B, C = args[:5]
        outs = empty_forward_outputs(u, A)
        fplan = triton_fwd.plan_for(u, A, B, C, facts=H200)
        triton_fwd.launch(*args, True, *outs, plan=fplan)
        grads = empty_backward_outputs(*args)
        bplan = triton_bwd.plan_for(u, A, B, (u,), facts=H200)
        triton_bwd.launch(torch.randn_like(u), None, *args, outs[2], True, *grads[:5], grads[5],
                          plan=bplan)  # fmt: skip
    finally:
        triton_launch._Launcher._launch = real
    return seen


def main() -> int:
    bad = 0
    for dtype in (torch.bfloat16,):  # the offline layout checks cover the dtypes; this the path
        launches = captured(dtype)
        checked = 0
        n = len(triton_launch._TRACE_CHECKED)
        for launcher, _grid, args, kwargs in launches:
            if launcher._check is None:
                continue
            triton_launch.traced_check(launcher._jit, launcher._check, args, kwargs, SM90)
            checked += 1
        # the lane forward and the backward's checked kernels, each compiled and checked
        ok = checked >= 2 and len(triton_launch._TRACE_CHECKED) == n + checked
        print(f"{dtype}: {checked} checked launches of {len(launches)} {'ok' if ok else 'FAILED'}")
        bad += not ok
    # a failing check: raised, and raised again from the cache without a compile
    launcher, _grid, args, kwargs = next(x for x in captured(torch.float32) if x[0]._check)

    def failing(compiled):
        raise LaneLayoutError("laid out differently")

    compiles = []
    real_compile = triton.compile
    for _ in range(2):
        triton.compile = lambda *a, **k: compiles.append(1) or real_compile(*a, **k)
        try:
            triton_launch.traced_check(launcher._jit, failing, args, kwargs, SM90)
            print("failing check did not raise FAILED")
            bad += 1
        except LaneLayoutError:
            pass
        finally:
            triton.compile = real_compile
    print(
        f"failing check raised twice, compiled {len(compiles)} time(s) {'ok' if compiles == [1] else 'FAILED'}"
    )
    bad += compiles != [1]
    # an unaligned first tensor: another specialization (another compile)
    n = len(triton_launch._TRACE_CHECKED)
    name = next(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))
    t = kwargs[name]
    shifted = {**kwargs, name: torch.empty(t.numel() + 1, dtype=t.dtype)[1:].view(t.shape)}
    triton_launch.traced_check(launcher._jit, launcher._check, args, shifted, SM90)
    grew = len(triton_launch._TRACE_CHECKED) == n + 1
    print(f"unaligned tensor, another specialization {'ok' if grew else 'FAILED'}")
    bad += not grew

    # dynamic shapes: a symbolic constexpr (the lane forward's SPLIT = nseg > 1) is checked at its
    # hint without adding a guard: the same specialization as the concrete value, from the cache
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    launcher, _grid, args, kwargs = next(
        x for x in captured(torch.bfloat16) if x[0]._check and "SPLIT" in x[3]
    )
    env = ShapeEnv()
    nseg = env.create_symintnode(env.create_symbol(3, ConstantSource("nseg")), hint=3)
    n = len(triton_launch._TRACE_CHECKED)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        triton_launch.traced_check(
            launcher._jit, launcher._check, args, {**kwargs, "SPLIT": nseg > 1}, SM90
        )
        same = len(triton_launch._TRACE_CHECKED) == n and kwargs["SPLIT"] is True
        triton_launch.traced_check(
            launcher._jit, launcher._check, args, {**kwargs, "SPLIT": nseg < 1}, SM90
        )
    ok = same and len(triton_launch._TRACE_CHECKED) == n + 1 and not caught and not env.guards
    print(f"symbolic constexpr checked at its hint, no guard {'ok' if ok else 'FAILED'}")
    bad += not ok

    # our stand-in compile failing (not the user's trace): a warning, no check, no error
    def never(compiled):
        raise LaneLayoutError("must not be reached")

    def broken(*a, **k):
        raise RuntimeError("compiler down")

    triton.compile = broken
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            triton_launch.traced_check(launcher._jit, never, args, kwargs, SM90)
    finally:
        triton.compile = real_compile
    warned = any("could not compile" in str(w.message) for w in caught)
    print(f"compile failure warned, not raised {'ok' if warned else 'FAILED'}")
    bad += not warned
    # no target (no GPU): nothing compiled, nothing raised
    triton_launch.traced_check(launcher._jit, failing, args, kwargs, None)
    print("no target ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
