"""Registration of ``ssmscan::rms_norm``, ``ssmscan::add_rms_norm`` and
``ssmscan::gated_rms_norm``: forward-only fused norms for inference.

CUDA (float16 / bfloat16 / float32): one Triton kernel (``triton_fwd``); elsewhere, and for
float64, the aten math of ``cpu``. No autograd: the models call these only when no gradient is
needed and keep their PyTorch modules for training.

Example:
    >>> import torch
    >>> import ssmscan.ops.rms_norm.op  # registers the ops
    >>> x = torch.tensor([[1.0, 1.0, 3.0, 3.0]])
    >>> torch.ops.ssmscan.gated_rms_norm(x, torch.full((1, 4), 30.0), torch.ones(4), 1e-5, 2,
    ...     False)
    tensor([[1., 1., 1., 1.]])
    >>> torch.ops.ssmscan.rms_norm(torch.full((1, 4), 2.0), torch.ones(4), 1e-5)
    tensor([[1.0000, 1.0000, 1.0000, 1.0000]])
    >>> out, residual = torch.ops.ssmscan.add_rms_norm(torch.ones(1, 4), torch.ones(1, 4),
    ...     torch.ones(4), 1e-5)
    >>> residual
    tensor([[2., 2., 2., 2.]])
"""

from __future__ import annotations

import torch

from ssmscan._library import triton_backed_op
from ssmscan.ops.common.checks import (
    FLOAT_DTYPES,
    check_dtype,
    check_same_device,
    check_shape,
    check_tensor,
    describe,
)
from ssmscan.ops.rms_norm import cpu


def _check(
    x: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, eps: float, group_size: int
) -> None:
    check_tensor("x", x)
    check_tensor("weight", weight)
    if x.dim() < 1:
        raise ValueError(f"x must be (..., dim); got {describe(x)}")
    dim = x.shape[-1]
    check_dtype("x", x, FLOAT_DTYPES)
    check_dtype("weight", weight, FLOAT_DTYPES)
    check_shape("weight", weight, (dim,), "(dim,) with dim = x.shape[-1]")
    named: list[tuple[str, torch.Tensor | None]] = [("x", x), ("weight", weight)]
    if z is not None:
        check_tensor("z", z)
        check_dtype("z", z, FLOAT_DTYPES)
        check_shape("z", z, tuple(x.shape), "shaped like x")
        named.append(("z", z))
    check_same_device(named)
    if group_size < 1 or dim % group_size:
        raise ValueError(f"group_size must divide dim = {dim} (x.shape[-1]); got {group_size}")
    if not eps >= 0.0:
        raise ValueError(f"eps must be >= 0; got {eps}")


def _fused(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return x.device.type == "cuda" and torch.float64 not in (x.dtype, weight.dtype)


@triton_backed_op("gated_rms_norm")
def gated_rms_norm(
    x: torch.Tensor,
    z: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    group_size: int,
    norm_before_gate: bool,
) -> torch.Tensor:
    """mamba-ssm's gated, grouped RMSNorm forward (``layernorm_gated.RMSNorm``):
    ``norm(x * silu(z)) * weight`` (``norm_before_gate=False``) or ``norm(x) * weight * silu(z)``,
    each group of ``group_size`` channels normalised on its own; float32 arithmetic (float64 for
    float64 x), result in x's dtype.

    Args:
        x: (..., dim) float16 / bfloat16 / float32 / float64.
        z: (..., dim) the gate, any float dtype, or None (no gate).
        weight: (dim,) any float dtype.
        eps: added to each group's mean square.
        group_size: channels per group, dividing dim (dim for one group).
        norm_before_gate: normalise before gating.

    Returns:
        (..., dim) in x's dtype, fresh and contiguous.
    """
    _check(x, z, weight, eps, group_size)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if _fused(x, weight):
        from ssmscan.ops.rms_norm import triton_fwd

        triton_fwd.launch(x, z, weight, eps, group_size, norm_before_gate, False, out)
        return out
    out.copy_(cpu.gated_rms_norm(x, z, weight, eps, group_size, norm_before_gate))
    return out


@triton_backed_op("rms_norm")
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm forward as a Mamba block's pre-norm: ``weight * y / sqrt(mean(y**2) + eps)`` with y
    = x rounded to weight's dtype (``RMSNorm(x.to(weight.dtype))``: the float32 residual stream
    normalised in the model's dtype), float32 arithmetic (float64 for float64 weights).

    Args:
        x: (..., dim) float16 / bfloat16 / float32 / float64.
        weight: (dim,) float16 / bfloat16 / float32 / float64.
        eps: added to the mean square.

    Returns:
        (..., dim) in weight's dtype, fresh and contiguous.
    """
    _check(x, None, weight, eps, x.shape[-1] if x.dim() >= 1 and x.shape[-1] > 0 else 1)
    out = torch.empty(x.shape, dtype=weight.dtype, device=x.device)
    if _fused(x, weight):
        from ssmscan.ops.rms_norm import triton_fwd

        triton_fwd.launch(x, None, weight, eps, x.shape[-1], False, True, out)
        return out
    out.copy_(cpu.rms_norm(x, weight, eps))
    return out


@triton_backed_op("add_rms_norm")
def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add of a Mamba block fused with the next block's pre-norm (mamba-ssm's
    ``layer_norm_fn(..., residual=..., prenorm=True)``): ``h = residual + x`` in their promoted
    dtype (float32 for a float32 residual stream and a 16-bit x), then ``rms_norm(h, weight,
    eps)``.

    Args:
        x: (..., dim) the block's output, float16 / bfloat16 / float32 / float64.
        residual: (..., dim) the residual stream, any float dtype.
        weight: (dim,) the next norm's weight.
        eps: added to the mean square.

    Returns:
        ``(normed (..., dim) in weight's dtype, h (..., dim) in the promoted dtype of x and
        residual)``, fresh and contiguous.
    """
    _check(x, None, weight, eps, x.shape[-1] if x.dim() >= 1 and x.shape[-1] > 0 else 1)
    check_tensor("residual", residual)
    check_dtype("residual", residual, FLOAT_DTYPES)
    check_shape("residual", residual, tuple(x.shape), "shaped like x")
    check_same_device([("x", x), ("residual", residual)])
    h_dtype = torch.promote_types(x.dtype, residual.dtype)
    out = torch.empty(x.shape, dtype=weight.dtype, device=x.device)
    h = torch.empty(x.shape, dtype=h_dtype, device=x.device)
    if _fused(x, weight) and h_dtype != torch.float64:
        from ssmscan.ops.rms_norm import triton_fwd

        triton_fwd.launch(x, None, weight, eps, x.shape[-1], False, True, out, residual, h)
        return out, h
    h.copy_(residual + x)
    out.copy_(cpu.rms_norm(h, weight, eps))
    return out, h
