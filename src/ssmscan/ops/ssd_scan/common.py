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
    prev = torch.cat([torch.zeros_like(s[:, :1]), s[:, :-1]], dim=1)
    return torch.cumsum((s != prev).to(torch.int64), dim=1)


def plan_chunk_size(nheads: int, headdim: int, dstate: int, ngroups: int) -> int:
    """Chunk length of the CPU kernel for a problem shape (the length L is left out on purpose:
    the plan must not change as L varies under dynamic shapes).

    Per chunk of Q steps the work is Q*Q*(dstate + headdim) for the intra-chunk products and
    Q*dstate*headdim for the states; per step the states cost dstate*headdim*2 whatever Q is, the
    intra-chunk part grows with Q. Small Q starves the BLAS calls. Measured on 2 cores (fp32,
    ``benchmarks/ssd_scan/bench_cpu.py --sweep``): 64 is best or within a few percent of best for
    dstate 16-128 and headdim 32-128 in forward and backward; 32 wins narrowly when both
    dstate and headdim are at most 32.
    """
    del nheads, ngroups  # the measured optimum did not depend on them
    return 32 if dstate <= 32 and headdim <= 32 else 64
