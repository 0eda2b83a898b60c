"""CPU realization of ``linear_scan``: op ``ssmscan::linear_scan_fwd_cpu`` over the C kernel.

Works on a time-major (L, M) copy; half precision is computed in float32.
"""

from __future__ import annotations

import math

import torch
from torch.library import custom_op

from ssmscan._library import qualname
from ssmscan.ops.common import cpu_lib
from ssmscan.ops.common.cpu_lib import ptr


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def time_major(t: torch.Tensor, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """``t`` with ``dim`` moved first and the rest flattened: contiguous (L, M) in ``dtype``."""
    moved = t.movedim(dim, 0)
    return moved.to(dtype).reshape(moved.shape[0], math.prod(moved.shape[1:])).contiguous()


@custom_op(qualname("linear_scan_fwd_cpu"), mutates_args=(), device_types="cpu")
def linear_scan_fwd_cpu(
    a: torch.Tensor, b: torch.Tensor, initial: torch.Tensor | None, dim: int, reverse: bool
) -> torch.Tensor:
    out = torch.empty(b.shape, dtype=b.dtype)
    cdt = compute_dtype(b.dtype)
    at, bt = time_major(a, dim, cdt), time_major(b, dim, cdt)
    L, M = bt.shape
    h0 = None if initial is None else initial.to(cdt).reshape(-1).contiguous()
    ot = torch.empty((L, M), dtype=cdt)
    fn = cpu_lib.kernel("lin_scan", cdt)
    workers = cpu_lib.num_workers(M // 512 + 1)

    def run(_i: int, begin: int, end: int) -> None:
        fn(ptr(at), ptr(bt), ptr(h0), int(reverse), L, M, begin, end, ptr(ot))

    if L and M:
        cpu_lib.run_ranges(run, M, workers)
    moved_shape = (L, *(s for i, s in enumerate(b.shape) if i != dim % b.dim()))
    out.copy_(ot.reshape(moved_shape).movedim(0, dim))
    return out


@linear_scan_fwd_cpu.register_fake
def _(a, b, initial, dim, reverse):
    return torch.empty(b.shape, dtype=b.dtype, device=b.device)
