"""The eager launch cache's key (Note [eager launch cache] in ``ops/common/triton_launch``): two
arguments with the same key must get the same specialization from Triton, or a cached kernel
compiled for one (say, 16-byte aligned pointers) would run on the other."""

from __future__ import annotations

import itertools

import pytest
import torch

pytest.importorskip("triton")


def _samples() -> list[object]:
    base = torch.zeros(64)
    ints = [0, 1, 2, 3, 15, 16, 17, 32, 48, 1000, 1024, 2**31 - 16, 2**31, 2**32 + 16, -1, -16]
    tensors = [
        base,
        base[1:],
        base[4:],
        base[2:],
        torch.zeros(8, dtype=torch.bfloat16),
        torch.zeros(9, dtype=torch.bfloat16)[1:],
        torch.zeros(8, dtype=torch.bfloat16)[8:],
        torch.zeros(4, dtype=torch.float16),
        torch.zeros(4, dtype=torch.int64),
    ]
    return [*ints, *tensors, 0.5, 2.0]


@pytest.mark.triton
def test_cache_key_separates_what_triton_specializes():
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    from ssmscan.ops.common.triton_launch import _spec

    vals = _samples()
    triton_spec = [native_specialize_impl(BaseBackend, v, False, True, True) for v in vals]
    ours = [_spec(v, False) for v in vals]
    for (a, ta, oa), (b, tb, ob) in itertools.combinations(zip(vals, triton_spec, ours), 2):
        if oa == ob:
            assert ta == tb, (a, b, ta, tb)
    # and the key is not trivially coarse: aligned / misaligned and 1 / other ints differ
    assert _spec(vals[16], False) != _spec(vals[17], False)
    assert _spec(1, False) != _spec(2, False) != _spec(16, False)


@pytest.mark.triton
def test_cache_key_of_constexprs_is_the_value():
    from ssmscan.ops.common.triton_launch import _spec

    assert _spec(16, True) == 16 and _spec(True, True) is True and _spec(None, True) is None


@pytest.mark.triton
def test_launch_hooks_send_launches_the_ordinary_way():
    """A profiler's launch hook must see every launch: the cache is bypassed when one is set
    (Triton 3.6 keeps an empty ``HookChain`` otherwise; older versions None or a callable)."""
    from triton import knobs

    from ssmscan.ops.common.triton_launch import _hooked

    assert not _hooked(None)
    assert _hooked(lambda *a: None)
    chain = getattr(knobs.runtime, "launch_enter_hook", None)
    if chain is not None and hasattr(chain, "calls"):
        assert not _hooked(chain) or chain.calls

        def hook(*a):
            return None

        chain.add(hook)
        try:
            assert _hooked(chain)
        finally:
            chain.remove(hook)


@pytest.mark.triton
def test_traced_launch_passes_constexpr_defaults():
    """Under ``wrap_triton`` tracing every parameter must be passed (the tracer checks the
    argument list against the signature and applies no defaults): the launcher adds the
    constexpr defaults a call left out, and keeps those it gave."""
    import triton
    import triton.language as tl
    from torch._library.triton import set_wrap_triton_enabled

    from ssmscan.ops.common import triton_launch

    @triton.jit
    def kernel(x, n, A: tl.constexpr, B: tl.constexpr = 3, C: tl.constexpr = 4):
        pass

    seen = {}

    class Recorder:
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                seen.update(kwargs, nargs=len(args))

            return run

    made = triton_launch._Launcher(kernel, None)
    made._kernel = Recorder()
    with set_wrap_triton_enabled(True):
        made[(1,)](torch.zeros(4), 4, A=2, C=5)
    assert seen == {"A": 2, "B": 3, "C": 5, "nargs": 2}


@pytest.mark.triton
def test_launcher_made_in_eager_still_traces():
    """A launcher first made where wrapping is off (an op's eager body) must still hand traced
    calls to the tracer: ``wrap_triton`` returns the bare kernel when called with wrapping
    disabled, so the launcher makes its wrapper with wrapping on."""
    from torch._higher_order_ops.triton_kernel_wrap import TraceableTritonKernelWrapper
    from torch._library.triton import set_wrap_triton_enabled
    from triton.runtime.jit import JITFunction

    from ssmscan.ops.common import triton_launch

    kernel = JITFunction(_empty_kernel)  # a JITFunction even under TRITON_INTERPRET=1
    with set_wrap_triton_enabled(False):
        made = triton_launch.launcher(kernel)
    assert isinstance(made._kernel, TraceableTritonKernelWrapper)


def _empty_kernel(x):
    pass


def test_inlined_key_equals_spec():
    """``_key`` (the eager launch path's inlined key) is exactly ``_spec`` per argument."""
    import torch

    from ssmscan.ops.common.triton_launch import _key, _spec

    t = torch.empty(8)
    vals = [t, t[1:], 0, 1, 16, 17, -5, 2**31, -(2**31) - 1, True, False, 1.5, None, "s", t.half()]
    for const in (False, True):
        flags = [const] * len(vals)
        assert _key(vals, flags) == [_spec(v, const) for v in vals]
    mixed = [i % 2 == 0 for i in range(len(vals))]
    assert _key(vals, mixed) == [_spec(v, c) for v, c in zip(vals, mixed)]


def test_traced_launch_flattens_contiguous_tensors():
    """Note [flat traced tensors]: traced launches get contiguous tensors as 1-D views of the
    same memory (no size-1 dimension with a symbolic stride for torch 2.11's Inductor to trip
    on); non-contiguous ones as they are."""
    import triton
    import triton.language as tl
    from torch._library.triton import set_wrap_triton_enabled

    from ssmscan.ops.common import triton_launch

    @triton.jit
    def kernel(x, y, n, out, A: tl.constexpr):
        pass

    seen = {}

    class Recorder:
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                seen.update(args=args, kwargs=kwargs)

            return run

    made = triton_launch._Launcher(kernel, None)
    made._kernel = Recorder()
    x = torch.randn(1, 3, 4)
    y = torch.randn(4, 3).t()
    out = torch.empty(2, 1, 5)
    with set_wrap_triton_enabled(True):
        made[(1,)](x, y, 7, out=out, A=1)
    fx, fy, n = seen["args"]
    assert fx.shape == (12,) and fx.data_ptr() == x.data_ptr()
    assert fy is y and n == 7
    fo = seen["kwargs"]["out"]
    assert fo.shape == (10,) and fo.data_ptr() == out.data_ptr()


def test_fast_launch_binds_in_signature_order(monkeypatch):
    """The eager fast path without a GPU: Triton's runtime pieces faked. The first launch
    compiles (``jit[grid]``, here a recorder) with ``None`` replaced by the placeholder and is
    cached; the second runs the cached kernel with every value in signature order (positional,
    keywords in any order, defaults filled in, ``None`` replaced), launch options in the key."""
    import inspect as _inspect

    from ssmscan.ops.common import triton_launch

    def fn(x, y, n, out, A, B=3, C=4):
        pass

    ran = []

    class Compiled:
        function, packed_metadata = "f", "m"

        def run(self, *a):
            ran.append(a)

    class Jit:
        def __init__(self):
            self.fn, self.compiles, self.pre_run_hooks = fn, [], []
            self.params = [
                type("P", (), {"is_constexpr": name in ("A", "B", "C")})()
                for name in _inspect.signature(fn).parameters
            ]

        def __getitem__(self, grid):
            def compile_(*a, **k):
                self.compiles.append((grid, a, k))
                return Compiled()

            return compile_

    class Active:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device):
            return 99

    knobs = type("K", (), {"runtime": type("R", (), {"launch_enter_hook": None,
                                                      "launch_exit_hook": None})()})()  # fmt: skip
    driver = type("D", (), {"active": Active()})()
    monkeypatch.setattr(triton_launch, "_TRITON", [knobs, driver])
    jit = Jit()
    x, out = torch.zeros(4), torch.zeros(4)
    dummy = triton_launch._dummy(x, True)
    for _ in range(2):
        triton_launch._fast_launch(jit, (5,), (x, None), {"A": 1, "out": out, "n": 7, "C": 9,
                                                           "num_warps": 2}, None, x)  # fmt: skip
    assert len(jit.compiles) == 1  # then cached
    grid, a, k = jit.compiles[0]
    assert grid == (5,) and a[0] is x and a[1] is dummy and k["num_warps"] == 2
    (launch,) = ran
    assert launch[:9] == (5, 1, 1, 99, "f", "m", None, None, None)
    assert list(launch[9:]) == [x, dummy, 7, out, 1, 3, 9]
    # another option value is another kernel
    triton_launch._fast_launch(jit, (5,), (x, None), {"A": 1, "out": out, "n": 7, "C": 9,
                                                       "num_warps": 4}, None, x)  # fmt: skip
    assert len(jit.compiles) == 2


@pytest.mark.triton
@pytest.mark.slow
def test_traced_launches_run_their_layout_checks():
    """Note [traced layout checks] without a GPU: the checked launches of a forward and a
    backward, as traced, compiled for sm_90 and checked; a failing check raises (again from the
    cache); an unaligned tensor is another specialization; a failing stand-in compile warns
    instead of breaking the trace; no target, no check (``traced_check_script.py``, a process
    without TRITON_INTERPRET)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = os.path.join(os.path.dirname(__file__), "traced_check_script.py")
    res = subprocess.run(
        [sys.executable, script], env=env, capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert res.stdout.count(" ok") == 6, res.stdout
