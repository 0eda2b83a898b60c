"""``ssmscan.distributed.prefix_halo``: the last steps before each rank's shard (the input a
causal convolution needs from earlier ranks)."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from ssmscan.distributed._comm import (
    GRAD_MODE,
    any_requires_grad,
    check_across_ranks,
    dtype_code,
    exchange,
    rank_and_world,
    tie,
)


def prefix_halo(
    x: torch.Tensor, width: int, group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """The ``width`` steps of the whole sequence just before this rank's shard, zero before its
    start; differentiable (the gradient reaches the ranks that own those steps).

    Shards may be shorter than ``width``: the halo then spans several earlier ranks. A causal
    depthwise convolution of kernel size k over ``cat(prefix_halo(x, k - 1), x)`` equals the
    zero-padded convolution of the whole sequence at this shard (Mamba's conv1d).

    Args:
        x: this rank's shard, (..., L_r) with the time dimension last; same leading shape and
            dtype on every rank.
        width: how many steps before the shard (>= 0).
        group: the process group whose ranks hold the shards (default group when None).

    Returns:
        (..., width), ``x``'s dtype. Under autograd, every rank backpropagates through it as
        ``ssmscan.distributed.selective_scan``'s results (its Autograd paragraph).

    Raises:
        ValueError on every rank when the ranks disagree on ``width``, x's number of
        dimensions, leading shape or dtype, when a shard is empty or ``width`` is negative;
        RuntimeError on every rank when the ranks' calls or backward passes are out of step.

    Example:
        >>> import torch, torch.distributed as dist
        >>> import ssmscan.distributed
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> ssmscan.distributed.prefix_halo(torch.ones(2, 5), 3)
        tensor([[0., 0., 0.],
                [0., 0., 0.]])
        >>> dist.destroy_process_group()
    """
    rank, world = rank_and_world(group)
    error = ValueError(f"width must be >= 0; got {width}") if width < 0 else None
    L = x.shape[-1]
    fields = [
        ("the shard length (x.shape[-1])", L),
        ("x.dim()", x.dim()),
        ("the product of x's leading dimensions", math.prod(x.shape[:-1])),
        ("dtype of x", dtype_code(x.dtype)),
        ("width", width),
        (GRAD_MODE, int(torch.is_grad_enabled())),
    ]
    call = check_across_ranks(
        "ssmscan.distributed.prefix_halo",
        fields,
        error,
        group,
        x.device,
        "the shard length (x.shape[-1])",
        any_requires_grad(x),
    )
    halo = x.new_zeros((*x.shape[:-1], width))
    if world == 1 or width == 0:
        return halo
    take = min(L, width)
    tail = torch.cat([x.new_zeros((*x.shape[:-1], width - take)), x[..., L - take :]], dim=-1)
    tails = exchange(tail, call, [x])  # (world, ..., width)
    for j in range(rank):
        n = min(call.fields[j][0], width)
        halo = torch.cat([halo, tails[j][..., width - n :]], dim=-1)[..., -width:]
    return tie(halo, tails)
