"""Registration of ``ssmscan::ssd_scan_fwd`` / ``ssmscan::ssd_scan_bwd``.

Opaque ``custom_op``s (the CPU kernel is BLAS calls and a loop over chunks, nothing Inductor
could see into). Their bodies dispatch on the device: CPU runs ``cpu.py``; other devices raise
``NotImplementedError`` (GPU kernels are not written yet). Every output is fresh and contiguous;
the fakes allocate exactly that. ``torch.export`` keeps ``ssd_scan_fwd`` as one node.

The forward saves only its inputs: the backward recomputes the chunk states (Note [SSD chunked
backward] in README.md).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.library import custom_op, register_autograd

from ssmscan._library import qualname
from ssmscan.ops.ssd_scan import cpu
from ssmscan.ops.ssd_scan.common import state_dtype


def _check_device_supported(x: torch.Tensor) -> None:
    if x.device.type != "cpu":
        raise NotImplementedError(
            f"ssmscan::ssd_scan has a CPU kernel only; got x on {x.device}. GPU kernels are "
            "future work: use impl='reference' (any device, slow) or move the tensors to the CPU"
        )


def _empty_forward_outputs(x: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (batch, L, nheads, headdim) in x's dtype, final_states (batch, nheads, headdim,
    dstate) in the state dtype), contiguous."""
    batch, _, nheads, headdim = x.shape
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    final = torch.empty(
        (batch, nheads, headdim, B.shape[3]), dtype=state_dtype(x.dtype), device=x.device
    )
    return out, final


@custom_op(qualname("ssd_scan_fwd"), mutates_args=())
def ssd_scan_fwd(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward SSD scan: (out, final_states)."""
    _check_device_supported(x)
    return cpu.ssd_forward(
        x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
        dt_softplus, dt_min, dt_max, chunk_size,
    )  # fmt: skip


@ssd_scan_fwd.register_fake
def _(
    x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_min, dt_max, chunk_size
):
    return _empty_forward_outputs(x, B)


def _like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype, device=t.device)


def _empty_backward_outputs(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]
]:
    """One contiguous gradient per differentiable input, in that input's shape and dtype; the
    optional inputs' gradients as a list in argument order (D, z, dt_bias, initial_states), only
    those given."""
    optional = [_like(t) for t in (D, z, dt_bias, initial_states) if t is not None]
    return _like(x), _like(dt), _like(A), _like(B), _like(C), optional


@custom_op(qualname("ssd_scan_bwd"), mutates_args=())
def ssd_scan_bwd(
    dout: torch.Tensor,
    dfinal_states: torch.Tensor | None,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    chunk_size: int,
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]
]:
    """Backward SSD scan: (dx, ddt, dA, dB, dC, [dD, dz, ddt_bias, dinitial_states for those
    given])."""
    _check_device_supported(x)
    grads = cpu.ssd_backward(
        dout, dfinal_states, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
        dt_softplus, dt_min, dt_max, chunk_size,
    )  # fmt: skip
    dx, ddt, dA, dB, dC, optional = _empty_backward_outputs(
        x, dt, A, B, C, D, z, dt_bias, initial_states
    )
    for buf, key in zip((dx, ddt, dA, dB, dC), ("x", "dt", "A", "B", "C")):
        buf.copy_(grads[key])
    present = [
        k
        for k, t in zip(("D", "z", "dt_bias", "initial_states"), (D, z, dt_bias, initial_states))
        if t is not None
    ]
    for buf, key in zip(optional, present):
        buf.copy_(grads[key])
    return dx, ddt, dA, dB, dC, optional


@ssd_scan_bwd.register_fake
def _(
    dout, dfinal_states, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
    dt_softplus, dt_min, dt_max, chunk_size,
):  # fmt: skip
    return _empty_backward_outputs(x, dt, A, B, C, D, z, dt_bias, initial_states)


# --- autograd -------------------------------------------------------------------------------


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    x, dt, A, B, C, D, z, dt_bias, h0, seq_idx, dt_softplus, dt_min, dt_max, chunk_size = inputs
    ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, h0, seq_idx)
    ctx.options = (dt_softplus, dt_min, dt_max, chunk_size)


def _backward(
    ctx: Any, dout: torch.Tensor | None, dfinal: torch.Tensor | None
) -> tuple[torch.Tensor | None, ...]:
    x, dt, A, B, C, D, z, dt_bias, h0, seq_idx = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(x)
    dx, ddt, dA, dB, dC, optional = torch.ops.ssmscan.ssd_scan_bwd(
        dout, dfinal, x, dt, A, B, C, D, z, dt_bias, h0, seq_idx, *ctx.options
    )
    rest = iter(optional)
    opt_grads = [next(rest) if t is not None else None for t in (D, z, dt_bias, h0)]
    return (dx, ddt, dA, dB, dC, *opt_grads, None, None, None, None, None)


register_autograd(qualname("ssd_scan_fwd"), _backward, setup_context=_setup_context)
