"""Pieces shared by the Triton selective-scan kernels (forward and backward).

Note [selective scan thread layout]
-----------------------------------
Every program owns one batch row ``b`` and a block of ``BLOCK_D`` channels, with *all* N states
of each channel, and walks time sequentially: the recurrence of each (d, n) lane is independent,
so no cross-thread scan is needed. The state is held as a 3-D register tile
``(NG, BLOCK_D, 4)`` with ``n = 4 * ng + j``: that shape makes Triton's layout heuristics give each
thread one channel and all of its states (``sizePerThread = [1, 1, 4]``, threads along BLOCK_D),
so the sums over n (``y = sum_n C h``, ``du``, ``ddelta``) are in-thread and the per-step B_t / C_t
vectors are read with 16-byte broadcast loads. To that end the launchers prepare, once per call:

* ``A2`` (NG, dim, 4) fp32: ``A * log2(e)``, zero-padded to NP = 4 * NG states (a padded state has
  decay 1 and input 0, so it stays 0);
* ``Bt``, ``Ct`` (batch, G, L, NP) fp32: B and C transposed time-major and padded (these are
  ``dim / N`` times smaller than u, so the copy is cheap).

Time is walked in tiles of ``T = 4`` steps: u, delta, z (and dout) are read as (BLOCK_D, 4) tiles,
one 16-byte (fp32) or 8-byte (16-bit) vector per thread and row, split into four columns in
registers (``_split4``), and the four steps are unrolled.

Note [selective scan segments]
------------------------------
One program per (batch, channel block) gives only batch x dim threads, too few to hide the exp2 and
load latencies at small batch. So L is also split into NSEG segments of SEG checkpoint chunks, one
program each (program axis 2), when batch x dim alone is short of ``TARGET_WARPS`` warps:

1. local pass: each segment runs from a zero state, giving its end state S_s and sum_t dt_t;
2. carry pass (one program per channel block, NSEG steps): h_{s+1} = exp(A sum dt_s) h_s + S_s,
   written to the checkpoint entry at the start of segment s + 1 (the recurrence is affine, so the
   end state of a segment is its decayed start state plus its end state from zero);
3. the real pass: each segment runs again from its carried start state, writing ``out`` and the
   checkpoints inside it; the last segment writes the final entry and ``last_state``.

The backward mirrors it with the adjoint, which needs no states: g_t = C_t dy_t + a_{t+1} g_{t+1}
(Note [selective scan backward]); a local reverse pass per segment from a zero adjoint, a carry
pass from the right, then the real backward per segment from its carried adjoint. With one
segment (enough channels) passes 1 and 2 are skipped and the walk is the plain sequential one.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

LOG2E = math.log2(math.e)
TILE_T = 4


@triton.jit
def _split4(x):
    """(R, 4) -> four (R,) columns."""
    a, b = tl.split(tl.reshape(x, (x.shape[0], 2, 2)))
    x0, x2 = tl.split(a)
    x1, x3 = tl.split(b)
    return x0, x1, x2, x3


@triton.jit
def _join4(x0, x1, x2, x3):
    """Four (R,) columns -> (R, 4), inverse of ``_split4``."""
    return tl.reshape(tl.join(tl.join(x0, x2), tl.join(x1, x3)), (x0.shape[0], 4))


@triton.jit
def _softplus(x):
    """softplus with F.softplus's threshold 20; log1p(e) = log(1 + e) * e / ((1 + e) - 1)."""
    e = tl.exp(tl.minimum(x, 20.0))
    w = 1.0 + e
    lp = tl.where(w == 1.0, e, tl.log(w) * (e / (w - 1.0)))
    return tl.where(x > 20.0, x, lp)


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _state_step(h, b_A2, dt, dtu, p_B, t, L, NP: tl.constexpr):
    """h_t = exp2(dt A2) h_{t-1} + dt u B_t for all (d, n) of the program (no output)."""
    b_B = tl.load(p_B + t * NP, mask=t < L, other=0.0)
    return tl.exp2(dt[:, None, None] * b_A2) * h + dtu[:, None, None] * b_B


# Warps (batch x channel blocks x segments) the launchers aim for before splitting L: 132
# multiprocessors x 16 warps. A module constant so the benchmark can time other choices.
TARGET_WARPS = 132 * 16


def segments(warps: int, n_chunks: int) -> tuple[int, int]:
    """(NSEG, SEG): split ``n_chunks`` checkpoint chunks into NSEG segments of SEG chunks (the last
    may be shorter) when ``warps`` (batch x channel blocks x warps per block) is below
    ``TARGET_WARPS``; (1, n_chunks) otherwise. Note [selective scan segments]."""
    want = max(1, min(n_chunks, -(-TARGET_WARPS // max(warps, 1))))
    seg = max(1, -(-n_chunks // want))
    return -(-n_chunks // seg) if n_chunks > 0 else 1, max(seg, 1)


def pad_states(N: int) -> int:
    """Padded state count NP (a multiple of 4, power of two)."""
    return max(4, triton.next_power_of_2(N))


def prep_A(A: torch.Tensor, NP: int) -> torch.Tensor:
    """A (dim, N) -> A * log2(e) as (NP // 4, dim, 4) fp32, zero-padded."""
    dim, N = A.shape
    a2 = A.to(torch.float32) * LOG2E
    if NP != N:
        a2 = torch.nn.functional.pad(a2, (0, NP - N))
    return a2.reshape(dim, NP // 4, 4).permute(1, 0, 2).contiguous()


def prep_A_t(A: torch.Tensor, NP: int) -> torch.Tensor:
    """A (dim, N) -> A * log2(e) as (NP, dim) fp32, zero-padded: the kernels' channel-contiguous
    state layout."""
    N = A.shape[1]
    a2 = A.to(torch.float32) * LOG2E
    if NP != N:
        a2 = torch.nn.functional.pad(a2, (0, NP - N))
    return a2.t().contiguous()


def prep_BC(X: torch.Tensor, batch: int, NP: int) -> torch.Tensor:
    """B or C, (batch, N, L) or (batch, G, N, L) -> (batch, G, L, NP) fp32, zero-padded."""
    if X.dim() == 3:
        X = X.unsqueeze(1)
    N = X.shape[2]
    xt = X.to(torch.float32).transpose(2, 3)
    if NP != N:
        xt = torch.nn.functional.pad(xt, (0, NP - N))
    return xt.contiguous()


def num_groups(B: torch.Tensor) -> int:
    return 1 if B.dim() == 3 else B.shape[1]


def block_channels(batch: int, dim: int, G: int) -> tuple[int, int]:
    """(BLOCK_D, num_warps): one channel per thread; the largest block that still gives a few
    programs per multiprocessor, and (for grouped B / C) one that never straddles two groups,
    so that B_t / C_t are broadcast loads and the dB / dC partials are per group."""
    block_d, warps = 32, 1
    for bd, w in ((128, 4), (64, 2)):
        if batch * triton.cdiv(dim, bd) >= 3 * 132:
            block_d, warps = bd, w
            break
    if G > 1:
        per_group = dim // G
        limit = per_group & -per_group  # largest power of two dividing it
        if limit < block_d:
            block_d, warps = limit, max(1, limit // 32)
    return block_d, warps
