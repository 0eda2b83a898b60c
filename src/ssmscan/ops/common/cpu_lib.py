"""Loading of the C CPU kernels (``ssmscan._cpu_kernels``) and running them on threads.

The library is built by ``pip install`` (see ``setup.py``) from ``cpu_kernels.c``, on x86-64 once
per ISA level; the best level this CPU supports is loaded. It is a plain
shared library called through ctypes; ctypes releases the GIL during a call, so the rows of one
op call are split into contiguous ranges and run on a small thread pool (``torch.get_num_threads()``
threads), each range writing disjoint outputs or its own partial buffers.
Nothing is loaded or started at import time.

The pool's threads exist only in the process that started them: a child made by ``os.fork``
(multiprocessing's fork start method, preforking servers, DataLoader workers) inherits the pool
object without its threads, and work submitted to it would never run. The child therefore drops
the inherited pool (``os.register_at_fork``) and starts its own on first use. (torch's own
OpenMP intra-op pool has the same limitation and no such reset: once the parent has run a
parallel torch op, a forked child must call ``torch.set_num_threads(1)`` before its own, as
DataLoader workers do; the pool then runs every call on the calling thread.)
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

_P = ctypes.c_void_p
_I = ctypes.c_int64
_B = ctypes.c_int

_SIGNATURES: dict[str, list[Any]] = {
    "ssm_fwd": [_P] * 9 + [_B] + [_I] * 7 + [_P] * 4,
    "ssm_bwd": [_P] * 11 + [_B] + [_I] * 7 + [_P] * 10,
    "lin_scan": [_P] * 3 + [_B] + [_I] * 4 + [_P],
}


def _variants() -> list[str]:
    """Module names of the kernel builds, best first, that this CPU can run."""
    capability = torch.backends.cpu.get_cpu_capability()
    order = {"AVX512": ["_v4", "_v3", ""], "AVX2": ["_v3", ""]}.get(capability, [""])
    return [f"ssmscan._cpu_kernels{suffix}" for suffix in order]


@functools.cache
def library() -> ctypes.CDLL:
    spec = None
    for name in _variants():
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None:
            break
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "ssmscan's CPU kernels (ssmscan._cpu_kernels) are not built. Install the package with "
            "`pip install -e .` (or `pip install .`) so setup.py compiles them; a C compiler is "
            "needed at install time."
        )
    lib = ctypes.CDLL(spec.origin)
    for base, argtypes in _SIGNATURES.items():
        for sfx in ("f32", "f64"):
            fn = getattr(lib, f"{base}_{sfx}")
            fn.argtypes = argtypes
            fn.restype = None
    lib.ssm_math_f32.argtypes = [_P, _I, _P, _P]
    lib.ssm_math_f32.restype = None
    return lib


def kernel(base: str, dtype: torch.dtype) -> Callable[..., None]:
    """The C function ``base`` for ``dtype`` (float32 or float64)."""
    sfx = {torch.float32: "f32", torch.float64: "f64"}[dtype]
    return getattr(library(), f"{base}_{sfx}")


@functools.cache
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ssmscan-cpu")


# A forked child starts with no pool threads: forget the parent's pools (see the module note).
os.register_at_fork(after_in_child=_pool.cache_clear)


def ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def split_ranges(total: int, parts: int) -> list[tuple[int, int]]:
    """``total`` items in at most ``parts`` contiguous, nearly equal, non-empty ranges."""
    parts = max(1, min(parts, total))
    step, extra = divmod(total, parts)
    ranges, start = [], 0
    for i in range(parts):
        end = start + step + (1 if i < extra else 0)
        ranges.append((start, end))
        start = end
    return ranges


def num_workers(total: int) -> int:
    return max(1, min(torch.get_num_threads(), total))


def run_ranges(fn: Callable[[int, int, int], None], total: int, workers: int) -> None:
    """Call ``fn(worker_index, begin, end)`` for each range of ``total`` rows, in parallel."""
    ranges = split_ranges(total, workers)
    if len(ranges) == 1:
        fn(0, *ranges[0])
        return
    pool = _pool(len(ranges))
    futures = [pool.submit(fn, i, b, e) for i, (b, e) in enumerate(ranges)]
    for f in futures:
        f.result()
