"""Registration of ``ssmscan::selective_scan_fwd`` / ``ssmscan::selective_scan_bwd``.

Both public ops are ``triton_op``s (defined through ``_library.triton_backed_op``): their body is the device dispatch. On CUDA it launches the
Triton kernels through ``wrap_triton`` (so ``torch.compile`` and AOTInductor see into them); on CPU
it calls the opaque C-kernel ops ``selective_scan_fwd_cpu`` / ``selective_scan_bwd_cpu``. The body
is also the fake: every path allocates its outputs with ``shapes.empty_*_outputs`` (fresh,
contiguous), so real and fake strides agree by construction. ``torch.export`` keeps the public op
as one node.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.library import register_autograd

from ssmscan._library import qualname, triton_backed_op
from ssmscan.ops.selective_scan import cpu
from ssmscan.ops.selective_scan.checks import check_canonical_forms


def _check_device_supported(u: torch.Tensor) -> None:
    if u.device.type not in ("cpu", "cuda", "meta"):
        raise NotImplementedError(
            f"ssmscan::selective_scan has kernels for cpu and cuda tensors; got u on {u.device}"
        )


@triton_backed_op("selective_scan_fwd")
def selective_scan_fwd(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    delta_softplus: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward scan: returns (out, last_state, checkpoints); see ``shapes`` for the contract."""
    _check_device_supported(u)
    check_canonical_forms("ssmscan::selective_scan_fwd", A, B, C)
    if u.device.type == "cuda":
        from ssmscan.ops.selective_scan import triton_fwd

        return triton_fwd.forward(
            u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus
        )
    return cpu.selective_scan_fwd_cpu(
        u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus
    )


@triton_backed_op("selective_scan_bwd")
def selective_scan_bwd(
    dout: torch.Tensor,
    dlast_state: torch.Tensor | None,
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    checkpoints: torch.Tensor,
    delta_softplus: bool,
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]
]:
    """Backward scan: (du, ddelta, dA, dB, dC, [dD, dz, ddelta_bias, dinitial_state for those
    given]); states are recomputed chunk by chunk from ``checkpoints``."""
    _check_device_supported(u)
    if u.device.type == "cuda":
        from ssmscan.ops.selective_scan import triton_bwd

        return triton_bwd.backward(
            dout, dlast_state, u, delta, A, B, C, D, z, delta_bias, initial_state, checkpoints,
            delta_softplus,
        )  # fmt: skip
    return cpu.selective_scan_bwd_cpu(
        dout,
        dlast_state,
        u,
        delta,
        A,
        B,
        C,
        D,
        z,
        delta_bias,
        initial_state,
        checkpoints,
        delta_softplus,
    )


# --- autograd -------------------------------------------------------------------------------

_INPUTS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus = inputs
    ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, initial_state, output[2])
    ctx.delta_softplus = delta_softplus
    ctx.mark_non_differentiable(output[2])


def _backward(
    ctx: Any, dout: torch.Tensor | None, dlast: torch.Tensor | None, _dckpt: torch.Tensor | None
) -> tuple[torch.Tensor | None, ...]:
    u, delta, A, B, C, D, z, delta_bias, initial_state, ckpt = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(u)
    du, ddelta, dA, dB, dC, optional = torch.ops.ssmscan.selective_scan_bwd(
        dout, dlast, u, delta, A, B, C, D, z, delta_bias, initial_state, ckpt, ctx.delta_softplus
    )
    return input_grads((du, ddelta, dA, dB, dC, optional), D, z, delta_bias, initial_state)


def input_grads(
    grads: tuple[Any, ...],
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
) -> tuple[torch.Tensor | None, ...]:
    """The backward's (du, ddelta, dA, dB, dC, [optional grads]) as one gradient per forward
    input (None for the optional inputs not given and for ``delta_softplus``)."""
    du, ddelta, dA, dB, dC, optional = grads
    rest = iter(optional)
    opt_grads = [next(rest) if t is not None else None for t in (D, z, delta_bias, initial_state)]
    return (du, ddelta, dA, dB, dC, *opt_grads, None)


register_autograd(qualname("selective_scan_fwd"), _backward, setup_context=_setup_context)
