"""CPU realization of one decode step: the C kernel ``ssu_step`` (ops/common/cpu_kernels_impl.h),
in place on the state, one pass over the picked rows.

The kernel reads every argument through its strides, so the zero-stride views Mamba-2 callers
pass (A, dt, D, dt_bias expanded over headdim) are never materialized, and it fuses the decay,
the update and the read-out: each state element is loaded and stored once. Only the small
per-entry tensors are converted, and only when their dtype is not the state's (x in bf16 with a
float32 state, say). Large batches are split over ``torch.get_num_threads()`` threads.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import is_in_torch_dispatch_mode

from ssmscan.ops.common import cpu_lib

# Below this many state elements a step runs on the calling thread: handing work to the pool
# costs more than it saves (a step over 1M elements takes about 1 ms on one core).
_PARALLEL_MIN_ELEMENTS = 1 << 20


def supported(state: torch.Tensor, cdt: torch.dtype) -> bool:
    """Whether the kernel takes this state: a real CPU tensor (not fake, not traced under a
    dispatch mode) in the compute dtype (float32 / float64) with its last dimension contiguous."""
    return (
        type(state) is torch.Tensor
        and state.device.type == "cpu"
        and state.dtype == cdt
        and state.stride(-1) == 1
        and not torch._is_functional_tensor(state)
        and not is_in_torch_dispatch_mode()
    )


@functools.cache
def _kernel(dtype: torch.dtype) -> Callable[..., None]:
    sfx = {torch.float32: "f32", torch.float64: "f64"}[dtype]
    fn = getattr(cpu_lib.library(), f"ssu_step_{sfx}")
    p, i = ctypes.c_void_p, ctypes.c_int64
    fn.argtypes = [p] * 10 + [ctypes.c_int] + [i] * 4 + [ctypes.POINTER(i)] + [i] * 2 + [p]
    fn.restype = None
    return fn


def _strides(t: torch.Tensor | None, ndim: int) -> list[int]:
    """Element strides of ``t`` seen as ``ndim`` dims (a Mamba-1 tensor gains a size-1 p dim)."""
    if t is None:
        return [0] * ndim
    s = list(t.stride())
    return s + [0] * (ndim - len(s))


def step_(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    state_batch_indices: torch.Tensor | None,
) -> torch.Tensor:
    """The step in place on ``state`` (``supported(state, ...)`` must hold; arguments already
    validated): returns out shaped like x in x's dtype."""
    cdt = state.dtype

    def conv(t: torch.Tensor) -> torch.Tensor:
        return t if t.dtype == cdt else t.to(cdt)

    def conv_opt(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else conv(t)

    xs, dts, As = conv(x), conv(dt), conv(A)
    zs, Ds, bs = conv_opt(z), conv_opt(D), conv_opt(dt_bias)
    if B.dim() == 2:  # Mamba-1 ungrouped: one group
        B, C = B[:, None], C[:, None]
    Bs = B.to(cdt).contiguous()
    Cs = C.to(cdt).contiguous()
    heads = state.dim() == 4
    H = state.shape[1]
    P = state.shape[2] if heads else 1
    N = state.shape[-1]
    G = Bs.shape[1]
    batch = x.shape[0]
    st = (
        _strides(state, 4)[:3]
        + _strides(xs, 3)
        + _strides(dts, 3)
        + _strides(zs, 3)
        + _strides(As, 3)
        + list(Bs.stride()[:2])
        + list(Cs.stride()[:2])
        + _strides(Ds, 2)
        + _strides(bs, 2)
    )
    if not heads:  # (.., dim, N) / (.., dim): the N or p stride is the last listed; p is size 1
        st[0:3] = [state.stride(0), state.stride(1), 0]
        st[12:15] = [As.stride(0), 0, As.stride(1)]
    stt = (ctypes.c_int64 * len(st))(*st)
    idx = None
    if state_batch_indices is not None:
        idx = state_batch_indices.to(torch.int64).contiguous()
    out = torch.empty((batch, H, P), dtype=cdt)
    fn = _kernel(cdt)
    ptr = cpu_lib.ptr
    args = (
        ptr(state), ptr(xs), ptr(dts), ptr(zs), ptr(As), ptr(Bs), ptr(Cs), ptr(Ds), ptr(bs),
        ptr(idx), int(dt_softplus), H, P, N, G, stt,
    )  # fmt: skip
    items = batch * H
    workers = cpu_lib.num_workers(items) if items * P * N >= _PARALLEL_MIN_ELEMENTS else 1

    def run(_: int, begin: int, end: int) -> None:
        fn(*args, begin, end, out.data_ptr())

    cpu_lib.run_ranges(run, items, workers)
    out = out.reshape(x.shape)
    return out if x.dtype == cdt else out.to(x.dtype)
