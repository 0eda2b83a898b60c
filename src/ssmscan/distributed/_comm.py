"""Communication for the context-parallel scans: the exchange of every rank's shard map, whose
backward no rank can skip, and the metadata rows that keep the ranks' collectives in step.

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

Note [unprunable exchange]: the exchange's backward is a collective, so every rank must run it in
every backward pass through the call, whatever the caller differentiates. The autograd engine
skips a node when no tensor whose gradient was asked for lies behind it: under
``torch.autograd.grad`` over a subset of the inputs, the exchange of the last rank (whose gathered
map is an unused constant) or of any rank whose map does not depend on the requested inputs would
be skipped there while the other ranks wait for it. So the exchange is made necessary by
construction:

- every tensor a call returns depends on the exchange's output (rank 0's results, which do not
  read the gathered maps, through an identity whose gradient for the maps is zero: ``tie``);
- the exchange takes every argument of the call that requires grad as an extra input (gradient
  zero through those edges), and a fresh leaf on a rank where none does while another rank's do.

Any tensor whose gradient can be requested through the call is one of the call's arguments or
lies behind one, hence behind the exchange: the engine runs the exchange's backward exactly once
per backward pass (``backward()``, ``autograd.grad`` over any subset, each pass under
``retain_graph``) on every rank that differentiates any of the call's results. A rank whose own
inputs need no grad still gets results that require grad when another rank's inputs do, and
must backpropagate through them like the others.

Note [metadata rows]: every collective of a call is preceded by an all-gather of one int64 row of
fixed width (``_ROW``) per rank: phase (forward or backward), function, the call's tag (a random
number drawn by rank 0 in the forward), an error flag, whether this rank's inputs require grad,
then the call's own fields. Ranks that agree on a row run the same data collective next. Ranks
that drifted apart (one backpropagating through a call the others have left, or through a
different call) meet at the next row, which has the same size in every phase, and raise the same
clear error instead of pairing a data collective with a different one (which hangs or corrupts).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

_DTYPES: tuple[torch.dtype, ...] = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
FUNCTIONS: tuple[str, ...] = (
    "ssmscan.distributed.selective_scan",
    "ssmscan.distributed.linear_scan",
    "ssmscan.distributed.prefix_halo",
    "ssmscan.distributed.all_gather",
)
_ROW = 32  # int64 values per rank in every metadata exchange (Note [metadata rows])
_FORWARD, _BACKWARD = 1, 2
_PHASE, _FUNCTION, _TAG, _ERROR, _GRAD, _HEAD = 0, 1, 2, 3, 4, 5  # columns; fields from _HEAD
_MAX_DIMS = 8  # all_gather compares this many leading dimensions one by one


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


def _sum_own_slice(grad: torch.Tensor, group: dist.ProcessGroup | None, rank: int) -> torch.Tensor:
    """The all-gather's adjoint: every rank's ``grad`` (world, ...) summed, this rank's slice."""
    grad = grad.contiguous()
    if _has_reduce_scatter(group):
        out = grad.new_empty(grad.shape[1:])
        dist.reduce_scatter_tensor(out, grad, group=group)
        return out
    total = grad.clone()
    dist.all_reduce(total, group=group)
    return total[rank]


@dataclasses.dataclass(frozen=True, eq=False)
class Call:
    """What a call's forward metadata check established; the same on every rank but ``rank``.

    Attributes:
        fn_name: the public function.
        group, rank, world: the process group, this rank in it, its size.
        tag: the call's identity, checked again by its backward (Note [metadata rows]).
        needs_grad: grad mode is on and some rank's inputs require grad: the exchange goes on
            every rank's graph.
        fields: every rank's field values, ``fields[rank][i]`` for the i-th field.
    """

    fn_name: str
    group: dist.ProcessGroup | None
    rank: int
    world: int
    tag: int
    needs_grad: bool
    fields: tuple[tuple[int, ...], ...]


def _exchange_rows(
    head: list[int],
    values: Sequence[int],
    group: dist.ProcessGroup | None,
    world: int,
    device: torch.device,
) -> list[list[int]]:
    row = [*head, *values]
    if len(row) > _ROW:
        raise ValueError(f"a metadata row holds at most {_ROW} values; got {len(row)}")
    meta = torch.tensor(row + [0] * (_ROW - len(row)), dtype=torch.int64, device=device)
    rows: list[list[int]] = _all_gather(meta, group, world).tolist()
    return rows


def _function(code: int) -> str:
    return FUNCTIONS[code] if 0 <= code < len(FUNCTIONS) else f"an unknown function ({code})"


def _check_in_step(rows: list[list[int]], phase: int, what: str) -> None:
    """Raise on every rank when the ranks are not all in ``phase`` of the same function."""
    if all(r[_PHASE] == phase and r[_FUNCTION] == rows[0][_FUNCTION] for r in rows):
        return
    names = {_FORWARD: "a call of", _BACKWARD: "the backward of"}
    doing = ", ".join(
        f"rank {i}: {names.get(r[_PHASE], 'an unknown phase of')} {_function(r[_FUNCTION])}"
        for i, r in enumerate(rows)
    )
    raise RuntimeError(
        f"{what}: the ranks' collectives are out of step ({doing}); every rank must make the "
        "same calls and backpropagate through the same calls, in the same order, as many times "
        "(when any rank's inputs require grad, every rank's results do)"
    )


def dtype_code(dtype: torch.dtype) -> int:
    """A small integer naming ``dtype`` in the metadata exchange (-1 for unsupported dtypes)."""
    return _DTYPES.index(dtype) if dtype in _DTYPES else -1


def _dtype_name(code: int) -> str:
    return str(_DTYPES[code]) if 0 <= code < len(_DTYPES) else "unsupported"


def any_requires_grad(*tensors: torch.Tensor | None) -> bool:
    """Whether grad mode is on and any of ``tensors`` requires grad."""
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors
    )


GRAD_MODE = "whether grad mode is on (torch.is_grad_enabled())"


def check_across_ranks(
    fn_name: str,
    fields: list[tuple[str, int]],
    local_error: Exception | None,
    group: dist.ProcessGroup | None,
    device: torch.device,
    length_field: str | None,
    requires_grad: bool,
) -> Call:
    """Gather every rank's metadata once and raise the same clear error on every rank.

    Args:
        fn_name: the public function (one of ``FUNCTIONS``), for messages.
        fields: (description, value) pairs that must agree across ranks, except ``length_field``
            (the shard length, which only has to be positive) and fields whose description
            starts with ``"dtype of"`` (compared and printed as dtypes). Include ``GRAD_MODE``
            when the call is differentiable: a rank outside grad mode would never run the
            exchange's backward.
        local_error: this rank's own argument error, if any; every other rank raises too, so no
            rank is left waiting in a collective.
        group: the process group.
        device: where the metadata tensor lives (the backend's device).
        length_field: the description of the shard-length field, or None.
        requires_grad: whether grad mode is on and one of this rank's inputs requires grad.

    Returns:
        the ``Call`` every rank agreed on.

    Raises:
        RuntimeError on every rank when some rank is in another function or in a backward
        (Note [metadata rows]); ValueError (or this rank's own error) on every rank when any
        check of the arguments fails.
    """
    rank, world = rank_and_world(group)
    head = [
        _FORWARD,
        FUNCTIONS.index(fn_name),
        secrets.randbits(62),
        int(local_error is not None),
        int(requires_grad),
    ]
    rows = _exchange_rows(head, [v for _, v in fields], group, world, device)
    _check_in_step(rows, _FORWARD, fn_name)
    bad = [r for r in range(world) if rows[r][_ERROR]]
    if local_error is not None:
        raise local_error
    if bad:
        raise ValueError(
            f"{fn_name}: rank(s) {bad} rejected their arguments (see the error on those ranks)"
        )
    for i, (name, _) in enumerate(fields, start=_HEAD):
        column = [rows[r][i] for r in range(world)]
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
    return Call(
        fn_name=fn_name,
        group=group,
        rank=rank,
        world=world,
        tag=rows[0][_TAG],
        needs_grad=any(r[_GRAD] for r in rows),
        fields=tuple(tuple(r[_HEAD : _HEAD + len(fields)]) for r in rows),
    )


def _check_backward(call: Call, device: torch.device) -> None:
    """The backward's metadata row: every rank in the backward of this same call."""
    head = [_BACKWARD, FUNCTIONS.index(call.fn_name), call.tag, 0, 0]
    rows = _exchange_rows(head, [], call.group, call.world, device)
    _check_in_step(rows, _BACKWARD, f"{call.fn_name} (backward)")
    tags = [r[_TAG] for r in rows]
    if any(t != tags[0] for t in tags):
        by_rank = ", ".join(f"rank {r}: call {t:016x}" for r, t in enumerate(tags))
        raise RuntimeError(
            f"{call.fn_name} (backward): the ranks are in the backward of different calls "
            f"({by_rank}); every rank must backpropagate through the same calls in the same order"
        )


class _Exchange(torch.autograd.Function):
    """(...) on every rank -> (world, ...) on every rank, with an edge to each anchor
    (Note [unprunable exchange]); backward: metadata row, then sum over ranks, own slice."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, call: Call, *anchors: torch.Tensor) -> torch.Tensor:
        ctx.call, ctx.anchors = call, len(anchors)
        return _all_gather(x, call.group, call.world)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        call: Call = ctx.call
        _check_backward(call, grad.device)
        own = _sum_own_slice(grad, call.group, call.rank)
        return (own, None, *([None] * ctx.anchors))


def exchange(x: torch.Tensor, call: Call, anchors: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """Every rank's ``x`` stacked in rank order, (world, *x.shape).

    When ``call.needs_grad`` the result is on the autograd graph on every rank, with an edge to
    each of ``anchors`` that requires grad (Note [unprunable exchange]): pass every tensor
    argument of the call. Every tensor the call returns must depend on the result (``tie``).
    """
    if not (call.needs_grad and torch.is_grad_enabled()):
        return _all_gather(x, call.group, call.world)
    live = [a for a in anchors if isinstance(a, torch.Tensor) and a.requires_grad]
    if not live and not x.requires_grad:  # another rank's inputs require grad, none of ours
        live = [torch.zeros((), device=x.device, requires_grad=True)]
    out: torch.Tensor = _Exchange.apply(x, call, *live)
    return out


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
    """``x``, with ``anchor`` on its autograd graph (Note [unprunable exchange])."""
    if not (torch.is_grad_enabled() and anchor.requires_grad):
        return x
    out: torch.Tensor = _Tie.apply(x, anchor)
    return out


def all_gather(
    x: torch.Tensor,
    group: dist.ProcessGroup | None = None,
    requires_grad: bool = False,
    anchors: Sequence[torch.Tensor] = (),
) -> torch.Tensor:
    """Differentiable all-gather: every rank's ``x`` stacked in rank order.

    Every rank of ``group`` calls it with the same shape and dtype (checked: one small metadata
    all-gather first). The backward is a collective. When grad mode is on and any rank's ``x``
    (or ``anchors``) requires grad, the result requires grad on every rank and every rank must
    backpropagate through it (or through a tensor computed from it) the same number of times;
    ranks that fall out of step raise an error on every rank instead of waiting.

    ``torch.autograd.grad`` skips the gather's backward on a rank where nothing requested lies
    behind it. Pass in ``anchors`` every tensor that this rank's results depend on other than
    through the gather (the gather gets an edge to each, gradient zero), and make every result
    depend on the gather, so that no rank's gather can be skipped.

    Args:
        x: a tensor of the same shape and dtype on every rank of ``group``.
        group: the process group (default group when None).
        requires_grad: count this rank's gather as differentiated even when neither ``x`` nor
            ``anchors`` require grad (automatic when another rank's do).
        anchors: tensors to keep the gather's backward on this rank's graph (see above).

    Returns:
        (world, *x.shape); its gradient sums every rank's gradient and hands rank r slice r.

    Raises:
        ValueError on every rank when the ranks' shapes or dtypes differ.

    Example:
        >>> import torch, torch.distributed as dist
        >>> import ssmscan.distributed
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> x = torch.ones(3, requires_grad=True)
        >>> y = ssmscan.distributed.all_gather(x)
        >>> y.shape
        torch.Size([1, 3])
        >>> (2 * y).sum().backward()
        >>> x.grad
        tensor([2., 2., 2.])
        >>> dist.destroy_process_group()
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor; got {type(x).__name__}")
    grad = any_requires_grad(x, *anchors) or (requires_grad and torch.is_grad_enabled())
    dims = list(x.shape[:_MAX_DIMS]) + [-1] * (_MAX_DIMS - min(x.dim(), _MAX_DIMS))
    fields = [
        ("x.dim()", x.dim()),
        ("x.numel()", x.numel()),
        ("dtype of x", dtype_code(x.dtype)),
        (GRAD_MODE, int(torch.is_grad_enabled())),
        *((f"x.shape[{i}]", s) for i, s in enumerate(dims)),
    ]
    name = "ssmscan.distributed.all_gather"
    call = check_across_ranks(name, fields, None, group, x.device, None, grad)
    return exchange(x, call, anchors)
