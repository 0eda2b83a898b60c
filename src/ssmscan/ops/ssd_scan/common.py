"""Pieces of the SSD scan shared by every realization: dtypes, the time-step transform, the
segments of packed sequences, and the chunk-size planner.

Pure aten, no control flow on tensor values: usable by the reference, the CPU kernel and graph
realizations alike.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def state_dtype(x_dtype: torch.dtype) -> torch.dtype:
    """Accumulation and state dtype for inputs of ``x_dtype``: float64 for float64, else float32."""
    return torch.float64 if x_dtype == torch.float64 else torch.float32


def process_dt(
    dt: torch.Tensor,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    dtype: torch.dtype,
) -> torch.Tensor:
    """The time step as the scan uses it, in ``dtype``: ``clamp(softplus(dt + dt_bias), dt_min,
    dt_max)`` (bias and softplus optional; softplus with threshold 20), in this order, as
    mamba-ssm's ``_chunk_cumsum_fwd``. ``dt`` (batch, L, nheads), ``dt_bias`` (nheads,)."""
    d = dt.to(dtype)
    if dt_bias is not None:
        d = d + dt_bias.to(dtype)
    if dt_softplus:
        d = F.softplus(d)
    return d.clamp(min=dt_min, max=dt_max)


def segment_ids(seq_idx: torch.Tensor) -> torch.Tensor:
    """(batch, L) int64 ids that grow by one wherever ``seq_idx`` changes; the first token's id is
    0 when its ``seq_idx`` is 0 (it continues the initial state's sequence) and 1 otherwise.

    Two tokens belong to one sequence exactly when their ids are equal; a token sees the initial
    state exactly when its id is 0. For nondecreasing ``seq_idx`` (mamba-ssm's packed layout)
    this is mamba-ssm's rule: tokens of different sequences never mix, and the initial state is
    the state of sequence 0.
    """
    s = seq_idx.to(torch.int64)
    L = s.shape[1]
    prev = torch.cat([torch.zeros_like(s[:, :1]), s], dim=1)[:, :L]  # no size L - 1 (symbolic L)
    return torch.cumsum((s != prev).to(torch.int64), dim=1)


def plan_chunk_size(nheads: int, headdim: int, dstate: int, ngroups: int) -> int:
    """Chunk length of the CPU kernel for a problem shape. The length L is left out on purpose:
    the plan must not change as L varies under dynamic shapes.

    Per chunk of Q steps the intra-chunk products cost Q*Q*(dstate + headdim) per head and grow
    with Q; the chunk states cost Q*dstate*headdim whatever Q is, but their matmuls have Q as
    their inner dimension and the loop over chunks runs L/Q steps, so a large state wants a
    longer chunk. Measured with ``benchmarks/ssd_scan/bench_cpu.py --sweep`` (2 cores of an
    Intel Xeon, fp32, forward / forward+backward ms, best in brackets):

        (batch, L, nheads, headdim, dstate)   Q=32         Q=64         Q=128
        (1, 2048, 24, 64, 16)               [51 / 161]    65 / 202     98 / 288
        (1, 2048, 24, 64, 64)               [68 / 230]    83 / 246    108 / 313
        (1, 2048, 48, 32, 32)               [58 / 200]    77 / 204     82 / 289
        (1, 2048, 24, 64, 128)               74 / 307    [70 / 241]    92 / 279
        (1, 2048, 16, 128, 128)              99 / 323    [93 / 315]   107 / 297
        (2, 1024, 8, 64, 256)                55 / 207     30 / 99     [25 / 94]

    Q = 256 was slowest everywhere. The optimum followed dstate alone.
    """
    del nheads, headdim, ngroups  # the measured optimum did not depend on them
    if dstate <= 64:
        return 32
    return 64 if dstate <= 128 else 128
