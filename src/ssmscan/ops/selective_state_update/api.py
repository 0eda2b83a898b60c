"""``ssmscan.selective_state_update``: one decode step of the selective scan."""

from __future__ import annotations

import torch
from torch._C._functorch import is_functorch_wrapped_tensor
from torch.overrides import has_torch_function

from ssmscan.ops.selective_state_update import cpu
from ssmscan.ops.selective_state_update import op as _op  # noqa: F401  (registers the op)
from ssmscan.ops.selective_state_update.checks import (
    check_selective_state_update_args,
    check_state_batch_indices_values,
    check_state_writable,
)


def _traced(t: torch.Tensor) -> bool:
    """Whether this call is being traced (``torch.compile``, ``torch.export``, fake tensors) rather
    than run."""
    from torch._subclasses.fake_tensor import is_fake

    if torch.compiler.is_compiling() or t.device.type == "meta":
        return True
    # a plain tensor that no functionalization wraps is real: skip is_fake's unwrapping
    return (type(t) is not torch.Tensor or torch._is_functional_tensor(t)) and is_fake(t)


def _plain(tensors: tuple) -> bool:
    """No ``__torch_function__`` override, functorch transform (vmap, grad) or tensor requiring
    grad (the op has no backward and must refuse, not ignore, that)."""
    return not has_torch_function(tensors) and not any(
        is_functorch_wrapped_tensor(t) or t.requires_grad for t in tensors
    )


def _direct_cuda(args: tuple) -> bool:
    """Whether an eager call may launch the Triton kernel directly: CUDA tensors with a float32 /
    16-bit state, plain (``_plain``) and no dispatch mode active. At batch 1 the step is
    host-bound, and the in-place custom op's dispatch (its aliasing check, the autograd and
    ADInplaceOrView layers, a second validation) took about 0.8 ms a call on an H100's host
    against mamba-ssm's 0.09 ms."""
    state = args[0]
    tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
    return (
        state.device.type == "cuda"
        and state.dtype != torch.float64
        and not torch._C._len_torch_dispatch_stack()
        and _plain(tensors)
    )


def _launch_cuda(args: tuple) -> torch.Tensor:
    """The step in place on CUDA by the Triton kernel, launched directly (no custom-op dispatch,
    no ``wrap_triton`` higher-order op: an eager launch is never traced): out, fresh."""
    from torch._library.triton import set_wrap_triton_enabled

    from ssmscan.ops.selective_state_update import triton_fwd

    state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi = args
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    with set_wrap_triton_enabled(False):
        triton_fwd.launch(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, out, state, sbi)
    return out


def _direct_cpu(args: tuple) -> bool:
    """Whether an eager call may run the CPU kernel directly: plain CPU tensors that the kernel
    takes, no ``__torch_function__`` override or mode, no functorch transform (vmap, grad), no
    tensor requiring grad (the op has no backward and must refuse, not ignore, that)."""
    state = args[0]
    tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
    cdt = torch.float64 if state.dtype == torch.float64 else torch.float32
    return cpu.supported(state, cdt) and _plain(tensors)


def _capturing(t: torch.Tensor) -> bool:
    return t.device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: torch.Tensor | None = None,
) -> torch.Tensor:
    """One step h = exp(dt A) h + dt B x, out = (C h + D x) * silu(z), updating ``state`` in place.

    Same signature and behaviour as mamba-ssm's (2.3.2) ``selective_state_update``: ``state`` is
    overwritten with the new state and ``out`` returned, in the Mamba-1 layout (3-D ``state``) or
    Mamba-2's decode layout (4-D ``state``, A / dt / D / dt_bias typically zero-stride views
    expanded over headdim). Unlike mamba-ssm, every shape must match its layout exactly (nothing
    is broadcast) and ``state`` may hold more rows than ``batch`` only with
    ``state_batch_indices``. In eager the step runs in place through the op
    ``ssmscan::selective_state_update_``, writing only the picked rows; traced
    (``torch.compile``, ``torch.export``) it is the functional op
    ``ssmscan::selective_state_update``, which returns ``(out, new_state)`` (call it directly to
    keep states immutable) followed by a copy into ``state``.

    Args:
        state: (rows, dim, N) or (rows, nheads, headdim, N); the dtype of x or float32 (float64
            for float64 x); updated in place, so no zero strides, and not requiring grad (the step
            has no backward) unless grad is disabled. ``rows == batch`` unless
            ``state_batch_indices`` is given.
        x: (batch, dim) or (batch, nheads, headdim), float32/float16/bfloat16/float64.
        dt: like x, same dtype.
        A: (dim, N) or (nheads, headdim, N); float32 or x's dtype.
        B, C: (batch, N), grouped (batch, G, N) with dim divisible by G (Mamba-1), or
            (batch, ngroups, N) with nheads divisible by ngroups (Mamba-2); x's dtype or float32.
        D: (dim,) or (nheads, headdim), or None; dtype like A.
        z: like x, or None.
        dt_bias: (dim,) or (nheads, headdim), or None; dtype like A.
        dt_softplus: dt = softplus(dt + dt_bias).
        state_batch_indices: (batch,) int32/int64 or None: the row of ``state`` that entry b
            reads and writes (continuous batching); a negative index marks a padding entry (output
            zero, no row written). Indices past the last row or picking a row twice are refused
            (checked in eager; under ``torch.compile`` or CUDA graph capture the values are the
            caller's to get right).

    Returns:
        out shaped like x, in x's dtype.

    Example:
        >>> import torch, ssmscan
        >>> h = torch.zeros(1, 2, 3)
        >>> out = ssmscan.selective_state_update(h, torch.ones(1, 2), torch.full((1, 2), 0.1),
        ...     -torch.ones(2, 3), torch.ones(1, 3), torch.ones(1, 3))
        >>> out.shape, bool(h.abs().sum() > 0)
        (torch.Size([1, 2]), True)

        Mamba-2 decode over a cache of 4 state rows, two sequences in rows 3 and 1:

        >>> nheads, headdim, N = 2, 3, 4
        >>> cache = torch.zeros(4, nheads, headdim, N)
        >>> A = -torch.rand(nheads)[:, None, None].expand(-1, headdim, N)
        >>> dt = torch.rand(2, nheads)[..., None].expand(-1, -1, headdim)
        >>> x, B, C = torch.randn(2, nheads, headdim), torch.randn(2, 1, N), torch.randn(2, 1, N)
        >>> y = ssmscan.selective_state_update(cache, x, dt, A, B, C,
        ...     state_batch_indices=torch.tensor([3, 1]))
        >>> y.shape, [bool(cache[r].abs().sum() > 0) for r in range(4)]
        (torch.Size([2, 2, 3]), [False, True, False, True])
    """
    check_selective_state_update_args(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices)
    check_state_writable(state)
    args = (state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices)
    if _traced(state):
        # traced: the functional op and a copy, which functionalization turns into an ordinary
        # graph output (an exported program keeps one functional node)
        out, new_state = torch.ops.ssmscan.selective_state_update(*args)
        state.copy_(new_state)
        return out
    if state_batch_indices is not None and not _capturing(state_batch_indices):
        check_state_batch_indices_values(state_batch_indices, state.shape[0])
    # eager: in place, only the picked rows written (no copy of the state or the whole cache)
    if _direct_cpu(args):
        # the op's own CPU kernel, called without the dispatcher: a decode step over a small
        # state is host-bound, and the custom op's dispatch (autograd and ADInplaceOrView
        # layers, a second validation) costs more than the kernel at batch 1
        return cpu.step_(*args)
    if _direct_cuda(args):
        return _launch_cuda(args)
    return torch.ops.ssmscan.selective_state_update_(*args)
