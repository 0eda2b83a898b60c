"""Communication for the context-parallel scans: a differentiable all-gather, a tie that keeps
every rank's graph attached to it, and the one cheap metadata check per call.

Note [context-parallel scan]: each rank r holds a contiguous shard of the sequence (rank order is
sequence order). The recurrence h_t = a_t h_{t-1} + b_t composes over a shard into one affine map
h_out = P_r * h_in + S_r, where P_r is the shard's decay product and S_r its final state from a
zero start. The forward gathers (P_r, S_r) from every rank (O(batch * dim * N) numbers per rank),
folds the maps of the shards before r into r's true initial state
h0_r = P_{r-1} (... (P_1 S_0 + ...) ...) + S_{r-1} (rank 0 starts from the user's initial state,
so its S_0 is already the true state after shard 0), and reruns the local scan from h0_r. The
backward is autograd through the same construction: the gradient of h0_r flows back through the
fold to the gathered (P_j, S_j), and the all-gather's adjoint sums every rank's gradient of the
gathered tensor and returns to rank j its own slice (a reduce-scatter; on backends without one, an
all-reduce and a slice), from where it reaches the local inputs through P_j and S_j.

Every rank must run the backward of the gather, also a rank whose outputs do not depend on the
gathered maps (rank 0): its outputs are tied to the gathered tensor by an identity whose gradient
for the gathered tensor is zero, so the gather's backward is on every rank's graph.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

_DTYPES: tuple[torch.dtype, ...] = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def rank_and_world(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """(rank in ``group``, size of ``group``); the default group when ``group`` is None."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "ssmscan.distributed needs an initialized process group "
            "(torch.distributed.init_process_group)"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def _has_reduce_scatter(group: dist.ProcessGroup | None) -> bool:
    return dist.get_backend(group) == "nccl"


def _all_gather(x: torch.Tensor, group: dist.ProcessGroup | None, world: int) -> torch.Tensor:
    x = x.contiguous()
    if _has_reduce_scatter(group):
        out = x.new_empty((world, *x.shape))
        dist.all_gather_into_tensor(out, x, group=group)
        return out
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x, group=group)
    return torch.stack(parts)


class _AllGather(torch.autograd.Function):
    """(...) on every rank -> (world, ...) on every rank; backward: sum over ranks, own slice."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        rank, world = rank_and_world(group)
        ctx.group, ctx.rank, ctx.world = group, rank, world
        return _all_gather(x, group, world)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous()
        if _has_reduce_scatter(ctx.group):
            out = grad.new_empty(grad.shape[1:])
            dist.reduce_scatter_tensor(out, grad, group=ctx.group)
            return out, None
        total = grad.clone()
        dist.all_reduce(total, group=ctx.group)
        return total[ctx.rank], None


def all_gather(
    x: torch.Tensor, group: dist.ProcessGroup | None = None, requires_grad: bool = False
) -> torch.Tensor:
    """Differentiable all-gather: every rank's ``x`` stacked in rank order.

    The backward is a collective: under grad mode every rank must put the gather on its graph
    (``x`` requiring grad, or ``requires_grad=True`` where this rank's ``x`` is a constant but
    other ranks' are not) and backpropagate through it.

    Args:
        x: a tensor of the same shape and dtype on every rank of ``group``.
        group: the process group (default group when None).
        requires_grad: put the gather on the graph even when ``x`` does not require grad.

    Returns:
        (world, *x.shape); its gradient sums every rank's gradient and hands rank r slice r.
    """
    if requires_grad and torch.is_grad_enabled() and not x.requires_grad:
        x = x.detach().requires_grad_()
    out: torch.Tensor = _AllGather.apply(x, group)
    return out


def any_requires_grad(*tensors: torch.Tensor | None) -> bool:
    """Whether grad mode is on and any of ``tensors`` requires grad."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors
    )


class _Tie(torch.autograd.Function):
    """Identity on ``x`` that also depends on ``anchor`` (gradient zero), see the Note."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        ctx.anchor_shape, ctx.anchor_dtype = anchor.shape, anchor.dtype
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        zero = grad.new_zeros(ctx.anchor_shape, dtype=ctx.anchor_dtype)
        return grad, zero


def tie(x: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    """``x``, with ``anchor`` on its autograd graph (Note [context-parallel scan])."""
    if not (torch.is_grad_enabled() and anchor.requires_grad):
        return x
    out: torch.Tensor = _Tie.apply(x, anchor)
    return out


def dtype_code(dtype: torch.dtype) -> int:
    """A small integer naming ``dtype`` in the metadata exchange (-1 for unsupported dtypes)."""
    return _DTYPES.index(dtype) if dtype in _DTYPES else -1


def _dtype_name(code: int) -> str:
    return str(_DTYPES[code]) if 0 <= code < len(_DTYPES) else "unsupported"


def check_across_ranks(
    fn_name: str,
    fields: list[tuple[str, int]],
    local_error: Exception | None,
    group: dist.ProcessGroup | None,
    device: torch.device,
    length_field: str,
) -> list[list[int]]:
    """Gather every rank's metadata once and raise the same clear error on every rank.

    Args:
        fn_name: the public function, for messages.
        fields: (description, value) pairs that must agree across ranks, except ``length_field``
            (the shard length, which only has to be positive) and fields whose description
            starts with ``"dtype of"`` (compared and printed as dtypes).
        local_error: this rank's own argument error, if any; every other rank raises too, so no
            rank is left waiting in a collective.
        group: the process group.
        device: where the metadata tensor lives (the backend's device).
        length_field: the description of the shard-length field.

    Returns:
        every rank's values, ``[rank][field]`` (index 0 of ``fields`` at column 1).

    Raises:
        ValueError (or this rank's own error) on every rank when any check fails.
    """
    _, world = rank_and_world(group)
    values = [0 if local_error is None else 1] + [v for _, v in fields]
    meta = torch.tensor(values, dtype=torch.int64, device=device)
    gathered = _all_gather(meta, group, world).tolist()
    bad = [r for r in range(world) if gathered[r][0]]
    if local_error is not None:
        raise local_error
    if bad:
        raise ValueError(
            f"{fn_name}: rank(s) {bad} rejected their arguments (see the error on those ranks)"
        )
    for i, (name, _) in enumerate(fields, start=1):
        column = [gathered[r][i] for r in range(world)]
        if name == length_field:
            empty = [r for r in range(world) if column[r] <= 0]
            if empty:
                raise ValueError(
                    f"{fn_name}: empty shard ({name} = 0) on rank(s) {empty}; every rank of the "
                    f"group must hold at least one step of the sequence (lengths by rank: {column})"
                )
            continue
        differ = [r for r in range(world) if column[r] != column[0]]
        if differ:
            show = _dtype_name if name.startswith("dtype of") else str
            by_rank = ", ".join(f"rank {r}: {show(column[r])}" for r in [0, *differ])
            raise ValueError(f"{fn_name}: ranks disagree on {name} ({by_rank})")
    return gathered
