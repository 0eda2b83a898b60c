"""``ssmscan.distributed.linear_scan``: h_t = a_t h_{t-1} + b_t over a sequence sharded across
ranks along ``dim`` (Note [context-parallel scan] in ``_comm``; the shard's map is
P = prod_t a_t, S = its last state from a zero start; the outputs are corrected by rerunning the
local scan from the true initial state, as in ``selective_scan``)."""

from __future__ import annotations

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
from ssmscan.ops.common.checks import (
    FLOAT_DTYPES,
    check_dtype,
    check_same_device,
    check_shape,
    check_tensor,
    describe,
)
from ssmscan.ops.linear_scan.api import linear_scan as _local_scan

_NAME = "ssmscan.distributed.linear_scan"
_LENGTH = "the shard length (b.shape[dim])"
_MAX_DIMS = 8  # other dimensions compared one by one; beyond this only their product
_FIELDS = (
    _LENGTH,
    "b.dim()",
    "dim",
    "dtype of b",
    "reverse",
    "whether initial is given on a rank other than the first in scan order",
    "the product of b's other dimensions",
    GRAD_MODE,
    *(f"b's other dimension {i} (the shape without dim)" for i in range(_MAX_DIMS)),
)


def _check_local(a: torch.Tensor, b: torch.Tensor, dim: int, initial: torch.Tensor | None) -> int:
    """``ssmscan.linear_scan``'s checks; returns ``dim`` made non-negative."""
    check_tensor("a", a)
    check_tensor("b", b)
    check_dtype("b", b, FLOAT_DTYPES)
    check_shape("a", a, tuple(b.shape), "(the shape of b; nothing is broadcast)")
    check_dtype("a", a, (b.dtype,), "the dtype of b")
    if b.dim() == 0:
        raise ValueError(
            f"b must have at least one dimension (the time dimension); got {describe(b)}"
        )
    if not -b.dim() <= dim < b.dim():
        raise ValueError(
            f"dim={dim} is out of range for b with {b.dim()} dimensions ({describe(b)})"
        )
    dim = dim % b.dim()
    if initial is not None:
        check_tensor("initial", initial)
        expected = tuple(s for i, s in enumerate(b.shape) if i != dim)
        check_shape("initial", initial, expected, f"(b's shape without dim {dim})")
        check_dtype("initial", initial, (b.dtype,), "the dtype of b")
    check_same_device([("b", b), ("a", a), ("initial", initial)])
    return dim


def linear_scan(
    a: torch.Tensor,
    b: torch.Tensor,
    dim: int = -1,
    reverse: bool = False,
    initial: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """Context-parallel ``ssmscan.linear_scan``: each rank holds a contiguous shard along ``dim``.

    Every rank of ``group`` calls this with its shard (rank order is sequence order, also with
    ``reverse``; shards may differ in length but none may be empty) and gets its slice of the
    single-process result; gradients are this rank's share of the single-process gradients.
    Ranks exchange one tensor of b's shape without ``dim`` (times 2) each way per call, plus a
    small metadata all-gather that checks the ranks agree, in each direction.

    Autograd: when grad mode is on and any rank's inputs require grad, every rank's results
    require grad (also on a rank whose own inputs do not), and every rank must backpropagate
    through them as many times and in the same order relative to its other
    ``ssmscan.distributed`` calls; what each rank differentiates is free (``backward()``,
    ``torch.autograd.grad`` over any subset of inputs, ``retain_graph``). Ranks out of step
    raise ``RuntimeError`` on every rank rather than wait (Note [metadata rows] in ``_comm``).

    Args:
        a: decay, this rank's shard, same shape and dtype as ``b``.
        b: input, this rank's shard, float32/float16/bfloat16/float64.
        dim: the time dimension (the sharded one).
        reverse: run from the last step of the whole sequence to the first.
        initial: ``b``'s shape without ``dim``, the state before the first step in scan order;
            given only on the rank that scans first (rank 0, or the last rank with ``reverse``).
        group: the process group whose ranks hold the shards (default group when None).

    Returns:
        h for this rank's shard, ``b``'s shape and dtype. The state carried between shards is
        rounded to ``b``'s dtype once per shard boundary.

    Raises:
        ValueError on every rank when the ranks disagree on shapes, ``dim``, dtype or ``reverse``,
        when a shard is empty, or when any rank's arguments are invalid; RuntimeError on every
        rank when the ranks' calls or backward passes are out of step.

    Example:
        >>> import torch, torch.distributed as dist
        >>> import ssmscan, ssmscan.distributed
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> a, b = torch.full((2, 5), 0.5), torch.ones(2, 5)
        >>> torch.allclose(ssmscan.distributed.linear_scan(a, b), ssmscan.linear_scan(a, b))
        True
        >>> dist.destroy_process_group()
    """
    rank, world = rank_and_world(group)
    first = world - 1 if reverse else 0  # the rank that scans first
    error: Exception | None = None
    grad = False
    try:
        dim = _check_local(a, b, dim, initial)
        grad = any_requires_grad(a, b, initial)
        others = [s for i, s in enumerate(b.shape) if i != dim]
        numel = 1
        for s in others:
            numel *= s
        values = [
            b.shape[dim],
            b.dim(),
            dim,
            dtype_code(b.dtype),
            int(reverse),
            int(initial is not None and rank != first),
            numel,
            int(torch.is_grad_enabled()),
            *(others + [-1] * _MAX_DIMS)[:_MAX_DIMS],
        ]
    except (TypeError, ValueError) as e:
        error, values = e, [0] * len(_FIELDS)
    device = b.device if isinstance(b, torch.Tensor) else torch.device("cpu")
    call = check_across_ranks(
        _NAME, list(zip(_FIELDS, values)), error, group, device, _LENGTH, grad
    )

    if world == 1:
        return _local_scan(a, b, dim, reverse, initial)
    pos = world - 1 - rank if reverse else rank  # position in scan order
    acc = torch.float64 if b.dtype == torch.float64 else torch.float32
    end = 0 if reverse else -1  # index of the shard's last step in scan order
    h: torch.Tensor | None = None
    if pos == 0:
        h = _local_scan(a, b, dim, reverse, initial)
        P, S = a.to(acc).prod(dim), h.select(dim, end).to(acc)
    elif pos < world - 1:
        S = _local_scan(a, b, dim, reverse, None).select(dim, end).to(acc)
        P = a.to(acc).prod(dim)
    else:  # nobody reads the map of the shard scanned last
        shape = [s for i, s in enumerate(b.shape) if i != dim]
        S = P = torch.zeros(shape, dtype=acc, device=b.device)
    maps = exchange(torch.stack([P, S]), call, [a, b, initial])  # (world, 2, *shape without dim)
    if pos == 0:
        assert h is not None
        return tie(h, maps)
    order = list(range(world))[::-1] if reverse else list(range(world))
    h0 = maps[order[0], 1]
    for j in order[1:pos]:  # the maps of the shards scanned before this one
        h0 = maps[j, 0] * h0 + maps[j, 1]
    return _local_scan(a, b, dim, reverse, h0.to(b.dtype))
