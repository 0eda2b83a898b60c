"""Validation of ``selective_state_update`` arguments (shapes, dtypes, devices, the state's memory).

Two layouts, told apart by ``state.dim()`` exactly as mamba-ssm does:

* Mamba-1, ``state`` 3-D: state (rows, dim, N), x / dt / z (batch, dim), A (dim, N), B / C
  (batch, N) or grouped (batch, G, N), D / dt_bias (dim,);
* Mamba-2, ``state`` 4-D: state (rows, nheads, headdim, N), x / dt / z (batch, nheads, headdim),
  A (nheads, headdim, N), B / C (batch, ngroups, N), D / dt_bias (nheads, headdim).

``rows`` equals ``batch`` unless ``state_batch_indices`` (batch,) picks the rows. Every tensor must
have exactly its layout's shape: views with zero strides (``A[:, None, None].expand(-1, headdim,
N)``, as transformers and mamba-ssm pass them) are fine, broadcasting a smaller tensor is not.
"""

from __future__ import annotations

import functools

import torch

from ssmscan.ops.common.checks import (
    FLOAT_DTYPES,
    Described,
    Layout,
    check_dtype,
    check_ndim,
    check_same_device,
    check_shape,
    check_tensor,
    describe,
)

INDEX_DTYPES = (torch.int32, torch.int64)


def _dedup(*dtypes: torch.dtype) -> tuple[torch.dtype, ...]:
    return tuple(dict.fromkeys(dtypes))


def check_selective_state_update_args(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    state_batch_indices: torch.Tensor | None,
) -> None:
    """Raise ``TypeError``/``ValueError`` naming the first bad argument (shapes, dtypes, devices;
    no values are read).

    The shape, dtype and device checks are a function of the arguments' ``Layout``s alone, cached
    for the layouts that passed (a decode step at batch 1 is host-bound: they took about 9 µs a
    call, the cached lookup about 5 on the same host); symbolic sizes (tracing) are checked
    uncached."""
    for name, t in (("state", state), ("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C)):
        check_tensor(name, t)
    for name, opt in (
        ("D", D),
        ("z", z),
        ("dt_bias", dt_bias),
        ("state_batch_indices", state_batch_indices),
    ):
        if opt is not None:
            check_tensor(name, opt)
    args = (state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices)
    if torch.compiler.is_compiling():  # traced: sizes may be symbolic, nothing to cache
        _check_layouts(*args)
        return
    # (shape, dtype, device) as plain tuples: a NamedTuple a tensor costs twice the time
    key = tuple([None if t is None else (t.shape, t.dtype, t.device) for t in args])
    try:
        hash(key)
    except TypeError:  # symbolic sizes (fake tensors outside Dynamo)
        _check_layouts(*args)
    else:
        _check_cached(*key)


@functools.lru_cache(maxsize=256)
def _check_cached(*key: tuple | None) -> None:
    """``_check_layouts`` of each argument's (shape, dtype, device); an exception is not
    cached, so a bad call raises every time."""
    layouts = [None if k is None else Layout(*k) for k in key]
    _check_layouts(*layouts)  # type: ignore[arg-type]  # the first six are never None


def _check_layouts(
    state: Described,
    x: Described,
    dt: Described,
    A: Described,
    B: Described,
    C: Described,
    D: Described | None,
    z: Described | None,
    dt_bias: Described | None,
    state_batch_indices: Described | None,
) -> None:
    """``check_selective_state_update_args`` past the tensor checks: shapes, dtypes and
    devices, of tensors or their ``Layout``s."""
    check_ndim(
        "state",
        state,
        (3, 4),
        "3-D (batch, dim, N) (Mamba-1) or 4-D (batch, nheads, headdim, N) (Mamba-2)",
    )
    heads = state.dim() == 4
    if heads:
        rows, nheads, headdim, N = state.shape
        chan: tuple[int, ...] = (nheads, headdim)
        chan_m = "(nheads, headdim)"
    else:
        rows, dim, N = state.shape
        chan = (dim,)
        chan_m = "(dim,)"
    lay = "the Mamba-2 layout (4-D state)" if heads else "the Mamba-1 layout (3-D state)"
    x_m = "(batch, nheads, headdim)" if heads else "(batch, dim)"

    check_ndim("x", x, (state.dim() - 1,), f"{x_m} in {lay}")
    check_dtype("x", x, FLOAT_DTYPES)
    batch = x.shape[0]
    if tuple(x.shape[1:]) != chan:
        raise ValueError(
            f"x must have shape (batch, {', '.join(str(c) for c in chan)}) {x_m} to match state "
            f"({describe(state)}); got {describe(x)}"
        )
    if state_batch_indices is None and rows != batch:
        raise ValueError(
            f"state has {rows} rows but x has batch {batch}; pass state_batch_indices (batch,) "
            f"to pick the state rows (state: {describe(state)}, x: {describe(x)})"
        )
    xs = tuple(x.shape)
    check_shape("dt", dt, xs, f"{x_m}, like x")
    check_dtype("dt", dt, (x.dtype,), "the dtype of x")
    if z is not None:
        check_shape("z", z, xs, f"{x_m}, like x")
        check_dtype("z", z, (x.dtype,), "the dtype of x")

    f64 = x.dtype == torch.float64
    state_dtypes = (torch.float64,) if f64 else _dedup(x.dtype, torch.float32)
    check_dtype("state", state, state_dtypes, "the dtype of x or float32; float64 with float64 x")

    # A, D, dt_bias: the model's parameters, float32 or in the dtype of x (a model cast to bf16)
    pdt = (torch.float32, torch.float64) if f64 else _dedup(torch.float32, x.dtype)
    a_m = "(nheads, headdim, N)" if heads else "(dim, N)"
    check_shape("A", A, (*chan, N), f"{a_m}, N = state.shape[-1]")
    check_dtype("A", A, pdt, "float32 or the dtype of x")
    for name, p in (("D", D), ("dt_bias", dt_bias)):
        if p is not None:
            check_shape(name, p, chan, chan_m)
            check_dtype(name, p, pdt, "float32 or the dtype of x")

    if heads:
        check_ndim("B", B, (3,), "3-D (batch, ngroups, N) in the Mamba-2 layout")
    else:
        check_ndim("B", B, (2, 3), "(batch, N) or grouped (batch, G, N) in the Mamba-1 layout")
    bc_m = "(batch, N)" if B.dim() == 2 else "(batch, ngroups, N)"
    bc = (batch, N) if B.dim() == 2 else (batch, B.shape[1], N)
    check_shape("B", B, bc, bc_m)
    check_shape("C", C, bc, f"{bc_m}, like B")
    groups = 1 if B.dim() == 2 else B.shape[1]
    split = chan[0]  # groups split the heads (Mamba-2) or the channels (Mamba-1)
    if groups == 0 or split % groups != 0:
        what = "nheads" if heads else "dim"
        raise ValueError(
            f"B has {groups} groups, which must divide {what}={split} (state: {describe(state)}); "
            f"got B {describe(B)}"
        )
    bc_dtypes = (torch.float64,) if f64 else _dedup(x.dtype, torch.float32)
    check_dtype("B", B, bc_dtypes, "the dtype of x or float32")
    check_dtype("C", C, bc_dtypes, "the dtype of x or float32")

    if state_batch_indices is not None:
        check_shape("state_batch_indices", state_batch_indices, (batch,), "(batch,)")
        check_dtype("state_batch_indices", state_batch_indices, INDEX_DTYPES)

    check_same_device(
        [
            ("state", state),
            ("x", x),
            ("dt", dt),
            ("A", A),
            ("B", B),
            ("C", C),
            ("D", D),
            ("z", z),
            ("dt_bias", dt_bias),
            ("state_batch_indices", state_batch_indices),
        ]
    )


def check_state_writable(state: torch.Tensor) -> None:
    """``state`` is written in place: no element may be shared (a zero stride of an ``expand``),
    and autograd must allow the write (the update has no backward)."""
    for size, stride in zip(state.shape, state.stride(), strict=True):
        if stride == 0 and size > 1:
            raise ValueError(
                f"state is updated in place, so its elements must not overlap; got an expanded "
                f"view with strides {tuple(state.stride())} ({describe(state)}); pass a "
                f"materialized tensor (e.g. state.clone())"
            )
    if state.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            f"state requires grad ({describe(state)}), but it is updated in place and the decode "
            f"step has no backward; pass a state that does not require grad, or call under "
            f"torch.no_grad()"
        )


def check_state_batch_indices_values(state_batch_indices: torch.Tensor, rows: int) -> None:
    """Every index is a row of ``state`` (``0 <= i < rows``) or negative (a padding entry, whose
    output is zero and whose state is left alone), and no row is picked twice. Reads the values
    (one device sync), so it runs in eager only."""
    idx = state_batch_indices.detach().cpu()
    bad = idx >= rows
    if bool(bad.any()):
        raise ValueError(
            f"state_batch_indices must be < the number of state rows {rows} (or negative for a "
            f"padding entry); got {idx[bad].tolist()} at positions "
            f"{bad.nonzero().flatten().tolist()} ({describe(state_batch_indices)})"
        )
    used = idx[idx >= 0]
    if used.unique().numel() != used.numel():
        raise ValueError(
            f"state_batch_indices must not pick a state row twice (each batch entry updates its "
            f"own row); got {idx.tolist()}"
        )
