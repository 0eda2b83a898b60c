"""Launch plan of the decode step's Triton kernel (``triton_fwd``): a pure, cached function from
the step's head geometry to a frozen plan. The launcher holds no policy of its own; an experiment
passes a plan of its own (``dataclasses.replace`` of a planned one)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ssmscan.ops.common.host_math import next_pow2


@dataclass(frozen=True)
class StateUpdatePlan:
    """How the decode step's kernel runs one head geometry (``plan_state_update``).

    Args:
        block_p: channels of a head per program; a program holds their (block_p, NP) states
            (NP: dstate rounded up to a power of two).
        warps: ``num_warps``.

    Example:
        >>> StateUpdatePlan(16, 4).block_p
        16
    """

    block_p: int
    warps: int


@functools.lru_cache(maxsize=256)
def plan_state_update(headdim: int, dstate: int) -> StateUpdatePlan:
    """The plan of a step over heads of ``headdim`` channels (a Mamba-1 state is one head of
    ``dim`` channels) and ``dstate`` states.

    A program holds at most 2048 float32 states (16 a thread at 4 warps) and at most 128
    channels. Mamba-2's layout (80 heads of 64 x 128) then takes 16 channels a program
    (``benchmarks/RESULTS.md``, the decode table). Mamba-1's (one head of 1536 x 16 at
    mamba-130m's size) takes 128, so 12 programs a row: not yet timed against smaller blocks
    (``benchmarks/ssd_scan/bench_gpu.py --decode-layout mamba1 --decode-block-p ...``).

    Args:
        headdim: channels per head (ints: the planner specializes them).
        dstate: states per channel.

    Returns:
        A frozen ``StateUpdatePlan``; cached.

    Example:
        >>> plan_state_update(64, 128)
        StateUpdatePlan(block_p=16, warps=4)
        >>> plan_state_update(1536, 16).block_p
        128
    """
    np_ = next_pow2(int(dstate))
    return StateUpdatePlan(block_p=max(1, min(128, 2048 // np_, next_pow2(int(headdim)))), warps=4)


__all__ = ["StateUpdatePlan", "plan_state_update"]
