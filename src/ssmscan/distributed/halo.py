"""``ssmscan.distributed.prefix_halo``: the last steps before each rank's shard (the input a
causal convolution needs from earlier ranks)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ssmscan.distributed._comm import (
    all_gather,
    any_requires_grad,
    check_across_ranks,
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
        (..., width), ``x``'s dtype.

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
    if width < 0:
        raise ValueError(f"width must be >= 0; got {width}")
    L = x.shape[-1]
    grad = any_requires_grad(x)
    fields = [
        ("the shard length (x.shape[-1])", L),
        ("x.dim()", x.dim()),
        ("whether grad mode is on and x requires grad (all ranks must agree)", int(grad)),
    ]
    meta = check_across_ranks(
        "ssmscan.distributed.prefix_halo",
        fields,
        None,
        group,
        x.device,
        "the shard length (x.shape[-1])",
    )
    halo = x.new_zeros((*x.shape[:-1], width))
    if world == 1 or width == 0:
        return halo
    take = min(L, width)
    tail = torch.cat([x.new_zeros((*x.shape[:-1], width - take)), x[..., L - take :]], dim=-1)
    tails = all_gather(tail, group, requires_grad=grad)  # (world, ..., width)
    for j in range(rank):
        n = min(meta[j][1], width)
        halo = torch.cat([halo, tails[j][..., width - n :]], dim=-1)[..., -width:]
    return tie(halo, tails) if rank == 0 else halo
