"""Registration of ``ssmscan::linear_scan_fwd`` / ``ssmscan::linear_scan_bwd``.

``triton_op``s whose body dispatches on device: the Triton kernel on CUDA, the C kernel op
``linear_scan_fwd_cpu`` on CPU. The backward is itself a reverse linear scan (Note [linear scan
backward]), so both directions share the forward kernels.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.library import register_autograd

from ssmscan._library import qualname, triton_backed_op
from ssmscan.ops.linear_scan import cpu
from ssmscan.ops.linear_scan.cpu import compute_dtype, time_major


@triton_backed_op("linear_scan_fwd")
def linear_scan_fwd(
    a: torch.Tensor, b: torch.Tensor, initial: torch.Tensor | None, dim: int, reverse: bool
) -> torch.Tensor:
    """h_t = a_t h_{t-1} + b_t along ``dim``; a fresh contiguous tensor shaped like ``b``."""
    if b.device.type == "cuda":
        from ssmscan.ops.linear_scan import triton_fwd

        cdt = compute_dtype(b.dtype)
        at, bt = time_major(a, dim, cdt), time_major(b, dim, cdt)
        h0 = None if initial is None else initial.to(cdt).reshape(-1).contiguous()
        ot = torch.empty(bt.shape, dtype=cdt, device=b.device)
        triton_fwd.launch(at, bt, h0, ot, reverse)
        moved_shape = (bt.shape[0], *(s for i, s in enumerate(b.shape) if i != dim % b.dim()))
        out = torch.empty(b.shape, dtype=b.dtype, device=b.device)
        out.copy_(ot.reshape(moved_shape).movedim(0, dim))
        return out
    if b.device.type not in ("cpu", "meta"):
        raise NotImplementedError(
            f"ssmscan::linear_scan has kernels for cpu and cuda; got {b.device}"
        )
    return cpu.linear_scan_fwd_cpu(a, b, initial, dim, reverse)


# Note [linear scan backward]
# h_t = a_t h_{t-1} + b_t (forward direction). With g_t = dL/dh_t over all paths,
#   g_t = grad_t + a_{t+1} g_{t+1}      -- a linear scan of grad in the other direction, with a
#                                          shifted by one step
#   db_t = g_t,  da_t = g_t h_{t-1},  dinitial = a_0 g_0.
# For ``reverse`` mirror every index.


@triton_backed_op("linear_scan_bwd")
def linear_scan_bwd(
    grad: torch.Tensor,
    a: torch.Tensor,
    h: torch.Tensor,
    initial: torch.Tensor | None,
    dim: int,
    reverse: bool,
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Gradients (da, db, [dinitial if initial was given]) of ``linear_scan_fwd``."""
    L = a.shape[dim]
    if L == 0:
        extra = [] if initial is None else [torch.zeros_like(initial)]
        return (
            torch.zeros_like(a),
            torch.zeros_like(grad, memory_format=torch.contiguous_format),
            extra,
        )
    first, rest = (
        (a.narrow(dim, L - 1, 1), a.narrow(dim, 0, L - 1))
        if reverse
        else (a.narrow(dim, 0, 1), a.narrow(dim, 1, L - 1))
    )
    # a shifted one step towards the scan's start; the step that falls off the end is the one the
    # scan of g begins with, where it multiplies a zero state, so any finite value serves: ``first``
    a_next = torch.cat([first, rest] if reverse else [rest, first], dim=dim)
    g = torch.ops.ssmscan.linear_scan_fwd(a_next, grad, None, dim, not reverse)
    if initial is not None:
        h0 = initial.unsqueeze(dim).to(h.dtype)
    else:
        h0 = torch.zeros(
            [1 if i == dim % h.dim() else s for i, s in enumerate(h.shape)],
            dtype=h.dtype,
            device=h.device,
        )
    h_prev = (
        torch.cat([h.narrow(dim, 1, L - 1), h0], dim=dim)
        if reverse
        else torch.cat([h0, h.narrow(dim, 0, L - 1)], dim=dim)
    )
    da = (g * h_prev).to(a.dtype)
    db = g.to(grad.dtype)
    extra = []
    if initial is not None:
        g0 = g.narrow(dim, L - 1, 1) if reverse else g.narrow(dim, 0, 1)
        extra.append((first * g0).squeeze(dim).to(initial.dtype))
    return da.contiguous(), db.contiguous(), extra


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    a, _b, initial, dim, reverse = inputs
    ctx.save_for_backward(a, output, initial)
    ctx.dim, ctx.reverse = dim, reverse


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    a, h, initial = ctx.saved_tensors
    da, db, extra = torch.ops.ssmscan.linear_scan_bwd(grad, a, h, initial, ctx.dim, ctx.reverse)
    return da, db, (extra[0] if initial is not None else None), None, None


register_autograd(qualname("linear_scan_fwd"), _backward, setup_context=_setup_context)
