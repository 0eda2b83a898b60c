"""Registration of ``ssmscan::ssd_scan_fwd`` / ``ssmscan::ssd_scan_bwd``.

Both are ``triton_op``s (defined through ``_library.triton_backed_op``) whose body is the device
dispatch: on CUDA it launches the Triton kernels (``triton_fwd``, ``triton_bwd``) through
``wrap_triton``, so ``torch.compile`` and AOTInductor see into them; on CPU it calls the opaque
ops ``ssd_scan_fwd_cpu`` / ``ssd_scan_bwd_cpu`` (``cpu.py``: BLAS calls and a loop over chunks,
nothing Inductor could see into). The body is also the fake: every path allocates its outputs
with ``shapes.empty_*_outputs`` (fresh, contiguous), so real and fake strides agree by
construction. ``torch.export`` keeps ``ssd_scan_fwd`` as one node.

The forward saves only its inputs: the backward recomputes the chunk states (Note [SSD chunked
backward] in README.md; Note [SSD Triton backward] in ``triton_bwd.py``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.library import custom_op, register_autograd

from ssmscan._library import qualname, triton_backed_op
from ssmscan.ops.ssd_scan import cpu
from ssmscan.ops.ssd_scan.shapes import empty_backward_outputs, empty_forward_outputs


def _check_device_supported(x: torch.Tensor) -> None:
    if x.device.type not in ("cpu", "cuda", "meta"):
        raise NotImplementedError(
            f"ssmscan::ssd_scan has kernels for cpu and cuda tensors; got x on {x.device}: use "
            "impl='reference' (any device, slow) or move the tensors to the CPU"
        )


# --- the CPU kernel, opaque ---------------------------------------------------------------------


@custom_op(qualname("ssd_scan_fwd_cpu"), mutates_args=())
def ssd_scan_fwd_cpu(
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
    """The CPU kernel's forward: (out, final_states)."""
    return cpu.ssd_forward(
        x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
        dt_softplus, dt_min, dt_max, chunk_size,
    )  # fmt: skip


@ssd_scan_fwd_cpu.register_fake
def _(
    x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_min, dt_max, chunk_size
):
    return empty_forward_outputs(x, B)


@custom_op(qualname("ssd_scan_bwd_cpu"), mutates_args=())
def ssd_scan_bwd_cpu(
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
    """The CPU kernel's backward, in ``shapes.empty_backward_outputs``' buffers."""
    grads = cpu.ssd_backward(
        dout, dfinal_states, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
        dt_softplus, dt_min, dt_max, chunk_size,
    )  # fmt: skip
    dx, ddt, dA, dB, dC, optional = empty_backward_outputs(
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


@ssd_scan_bwd_cpu.register_fake
def _(
    dout, dfinal_states, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
    dt_softplus, dt_min, dt_max, chunk_size,
):  # fmt: skip
    return empty_backward_outputs(x, dt, A, B, C, D, z, dt_bias, initial_states)


# --- the public ops -----------------------------------------------------------------------------


@triton_backed_op("ssd_scan_fwd")
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
    """Forward SSD scan: (out, final_states). ``chunk_size`` is the CPU kernel's chunk; the
    Triton kernels run their planner's (``plan.plan_ssd``): it changes the rounding only."""
    _check_device_supported(x)
    if x.device.type == "cuda":
        from ssmscan.ops.ssd_scan import triton_fwd

        return triton_fwd.forward(
            x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_min, dt_max
        )
    return torch.ops.ssmscan.ssd_scan_fwd_cpu(
        x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
        dt_softplus, dt_min, dt_max, chunk_size,
    )  # fmt: skip


@triton_backed_op("ssd_scan_bwd")
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
    if x.device.type == "cuda":
        from ssmscan.ops.ssd_scan import triton_bwd

        return triton_bwd.backward(
            dout, dfinal_states, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
            dt_softplus, dt_min, dt_max,
        )  # fmt: skip
    return torch.ops.ssmscan.ssd_scan_bwd_cpu(
        dout, dfinal_states, x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
        dt_softplus, dt_min, dt_max, chunk_size,
    )  # fmt: skip


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
