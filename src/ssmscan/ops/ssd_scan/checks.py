"""Validation of ``ssd_scan`` arguments (shapes, dtypes, devices, options)."""

from __future__ import annotations

import torch

from ssmscan.ops.common.checks import (
    FLOAT_DTYPES,
    check_dtype,
    check_ndim,
    check_same_device,
    check_shape,
    check_tensor,
    describe,
)
from ssmscan.ops.ssd_scan.common import state_dtype

SEQ_IDX_DTYPES = (torch.int32, torch.int64)


def check_ssd_scan_args(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int | None,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    dt_limit: tuple[float, float],
) -> None:
    """Raise ``TypeError``/``ValueError`` naming the first bad argument.

    Dtypes: ``x`` float32/float16/bfloat16/float64; ``z`` like ``x``; every other float tensor in
    ``x``'s dtype or the state dtype (float32, or float64 for float64 ``x``), as mamba-ssm's
    models hold A, D and dt_bias in float32 next to bfloat16 activations.
    """
    for name, t in (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C)):
        check_tensor(name, t)
    optional = (
        ("D", D),
        ("z", z),
        ("dt_bias", dt_bias),
        ("initial_states", initial_states),
        ("seq_idx", seq_idx),
    )
    for name, opt in optional:
        if opt is not None:
            check_tensor(name, opt)

    check_ndim("x", x, (4,), "4-D (batch, L, nheads, headdim)")
    check_dtype("x", x, FLOAT_DTYPES)
    batch, L, nheads, headdim = x.shape
    floats = tuple(dict.fromkeys((x.dtype, state_dtype(x.dtype))))
    why = "the dtype of x or the state dtype"
    check_shape("dt", dt, (batch, L, nheads), "(batch, L, nheads)")
    check_dtype("dt", dt, floats, why)
    check_shape("A", A, (nheads,), "(nheads,)")
    check_dtype("A", A, floats, why)
    check_ndim("B", B, (4,), "4-D (batch, L, ngroups, dstate)")
    ngroups, dstate = B.shape[2], B.shape[3]
    check_shape("B", B, (batch, L, ngroups, dstate), "(batch, L, ngroups, dstate)")
    if ngroups == 0 or nheads % ngroups != 0:
        raise ValueError(
            f"nheads={nheads} (x: {describe(x)}) must be divisible by ngroups={ngroups} "
            f"(B: {describe(B)})"
        )
    check_dtype("B", B, floats, why)
    check_shape("C", C, (batch, L, ngroups, dstate), "(batch, L, ngroups, dstate), like B")
    check_dtype("C", C, floats, why)
    if D is not None:
        if tuple(D.shape) not in ((nheads, headdim), (nheads,)):
            raise ValueError(
                f"D must have shape ({nheads}, {headdim}) (nheads, headdim) or ({nheads},) "
                f"(nheads,); got {describe(D)}"
            )
        check_dtype("D", D, floats, why)
    if z is not None:
        check_shape("z", z, (batch, L, nheads, headdim), "(batch, L, nheads, headdim), like x")
        check_dtype("z", z, (x.dtype,), "the dtype of x")
    if dt_bias is not None:
        check_shape("dt_bias", dt_bias, (nheads,), "(nheads,)")
        check_dtype("dt_bias", dt_bias, floats, why)
    if initial_states is not None:
        check_shape(
            "initial_states",
            initial_states,
            (batch, nheads, headdim, dstate),
            "(batch, nheads, headdim, dstate)",
        )
        check_dtype("initial_states", initial_states, floats, why)
    if seq_idx is not None:
        check_shape("seq_idx", seq_idx, (batch, L), "(batch, L)")
        check_dtype("seq_idx", seq_idx, SEQ_IDX_DTYPES, "integer sequence index per token")
    if chunk_size is not None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive int or None; got {chunk_size!r}")
    if (
        not isinstance(dt_limit, tuple)
        or len(dt_limit) != 2
        or not all(isinstance(v, (int, float)) for v in dt_limit)
        or not dt_limit[0] <= dt_limit[1]  # also false for NaN
    ):
        raise ValueError(
            f"dt_limit must be a (min, max) tuple of floats with min <= max; got {dt_limit!r}"
        )
    check_same_device([("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C), *optional])
