"""Triton forward kernels of ``ssmscan::selective_scan_fwd`` (CUDA): the launcher, and the 2-D
kernel, used for NP > 32 and wherever the lane kernel (``triton_fwd_lane``, the default: Note
[selective scan forward lanes]) fails its layout check.

Each program owns (batch b, BLOCK_D channels, all states, one segment of L) and walks its segment
sequentially in registers, one exp2 per (d, n, t); with several segments a local pass and a carry
pass come first (Note [selective scan segments] in ``triton_common``). The state before every
CHECKPOINT_LEN-step chunk, and the final state as the last entry, are written to ``checkpoints``
(``shapes``: (batch, dim, NCK, N)) so that the backward can recompute states chunk by chunk.

Note [selective scan forward layout]
------------------------------------
The forward's state-shaped buffers (A2, initial state, checkpoints, segment states) are
state-contiguous, (dim, NP), unlike the backward's (NP, dim) (Note [selective scan thread layout]).
Triton's coalescing then spreads a channel's states over NP / 4 threads of one warp
(threadsPerWarp [8, 4] at NP = 16), so ``y = sum_n C h`` ends with two butterfly shuffles. u /
delta / z are read and ``out`` written as (BLOCK_D, TT) tiles, TT = 8 steps per channel, in the
state's layout (sizePerThread [1, 2]: each of a channel's 4 threads holds 2 steps), so softplus /
gate / D are computed once per element, spread over the threads, and a step's column (``_col``) is
two butterfly shuffles away. The checkpoints are written straight into the op's (batch, dim, NCK,
N) output when N is a power of two >= 4. With one segment the loop bounds are plain 0 / L
(``SPLIT``): the segment bounds' min() cost 17-20% of the time.

Why (H200, 2026-11-30): the previous layout (one channel per thread with all 16 states) gives only
batch x dim threads, 1024 warps at (8, 4096, 2048, 16), about 2 per scheduler: 197 instructions per
step issued at ~30% of the issue rate, and time fell about linearly with more warps. Spreading the
states over 4 threads gives 4x the warps at 48-56 registers, for 4 x 70 instructions per
channel-step. Forward, library op, same process as mamba-ssm: 1.39 -> 1.34 ms fp32 and 1.32 -> 1.19
ms bf16 at (8, 4096, 2048, 16); 0.66 -> 0.64 / 0.63 -> 0.61 ms at (16, 1536, 1024, 16); 0.36 -> 0.31
/ 0.34 -> 0.33 ms at (1, 1536, 4096, 16); but 2.01 -> 2.37 / 1.89 -> 2.28 ms at (1, 1024, 65536, 16)
(the split path).

Instruction order matters more than instruction count here (H200, fourth session,
``split_proto/probe5.py`` .. ``probe8.py``, ms at (8, 4096, 2048, 16) fp32 / bf16 and (16, 1536,
1024, 16) fp32 / bf16): loading C_t next to B_t before the update, instead of after it, took the
kernel from 1.34 / 1.21 / 0.66 / 0.62 to 1.04 / 0.87 / 0.45 / 0.39 (48 -> 62 registers, same
instructions); loading every B_t / C_t of the tile, and z, before the first update took it to
0.86 / 0.80 / 0.38 / 0.36 (124 registers: 16 warps per multiprocessor instead of 32, but the
loads of a tile in flight together). Other one-line changes (the final store unconditional, 1-D
program ids) moved the time by 10-30% either way: check ``n_regs`` and time on the device after
touching the loop.
"""

from __future__ import annotations

import functools
import warnings

import torch
import triton
import triton.language as tl
from torch._library.triton import is_wrap_triton_enabled

from ssmscan.ops.common.host_math import cdiv
from ssmscan.ops.common.launch_plan import planned
from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.selective_scan import triton_common, triton_fwd_tchain, triton_fwd_tlane
from ssmscan.ops.selective_scan.shapes import (
    CHECKPOINT_LEN,
    empty_forward_outputs,
    num_checkpoints,
)
from ssmscan.ops.selective_scan.triton_common import (
    _sigmoid,
    _softplus,
    as_f32,
    num_groups,
    pad_states,
    prep_A,
    prep_BC,
    prep_BC_lane,
    segments,
)
from ssmscan.ops.selective_scan.triton_fwd_lane import (
    LaneLayoutError,
    _selective_scan_fwd_lane_kernel,
    check_lane_layout,
    lane_geometry,
    padded_steps,
)
from ssmscan.ops.selective_scan.triton_fwd_lane2 import _selective_scan_fwd_lane2_kernel


@triton.jit
def _col(x, o_t, j: tl.constexpr):
    """Column j of a (BLOCK_D, TT) tile as a (BLOCK_D,) vector: a select and a sum over the row
    (in-thread where the row lives in one thread; the -0.0 fill makes those adds fold away,
    ``x + -0.0 == x``)."""
    return tl.sum(tl.where(o_t[None, :] == j, x, -0.0), axis=1)


@triton.jit
def _fwd_tile(
    h,
    b_A2,
    u,
    delta,
    z,
    out,
    b_bias,
    b_D,
    p_B,
    p_C,
    row,
    m_d,
    t0,
    t_end,
    o_t,
    dt_sum,
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,
    TT: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    LOCAL: tl.constexpr,
):
    """TT time steps t0 .. t0 + TT - 1 (Note [selective scan forward layout]); stores y unless
    LOCAL. Returns (h, dt_sum)."""
    o_tt = t0 + o_t  # (TT,)
    m_t = o_tt < t_end
    m = m_d[:, None] & m_t[None, :]
    p = row[:, None] + o_tt[None, :]  # (BLOCK_D, TT)
    b_u = tl.load(u + p, mask=m, other=0.0).to(tl.float32)
    b_dt = tl.load(delta + p, mask=m, other=0.0).to(tl.float32)
    if HAS_Z and not LOCAL:
        b_z = tl.load(z + p, mask=m, other=0.0).to(tl.float32)
    # every B_t / C_t of the tile loaded before the first update (the Note: in flight together)
    Bs = ()
    Cs = ()
    for j in tl.static_range(TT):
        m_j = t0 + j < t_end
        Bs = Bs + (tl.load(p_B + (t0 + j) * NP, mask=m_j, other=0.0),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        if not LOCAL:
            Cs = Cs + (tl.load(p_C + (t0 + j) * NP, mask=m_j, other=0.0),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    if HAS_BIAS:
        b_dt += b_bias[:, None]
    if SOFTPLUS:
        b_dt = _softplus(b_dt)
    b_dt = tl.where(m, b_dt, 0.0)  # padded steps: decay 1, input 0
    if LOCAL:
        dt_sum += tl.sum(b_dt, axis=1)
    b_du = b_dt * b_u
    b_y = tl.zeros_like(b_u)
    for j in tl.static_range(TT):
        b_dtj = _col(b_dt, o_t, j)
        h = tl.exp2(b_dtj[:, None] * b_A2) * h + _col(b_du, o_t, j)[:, None] * Bs[j][None, :]
        if not LOCAL:
            b_yj = tl.sum(h * Cs[j][None, :], axis=1)
            b_y = tl.where(o_t[None, :] == j, b_yj[:, None], b_y)
    if not LOCAL:
        if HAS_D:
            b_y += b_D[:, None] * b_u
        if HAS_Z:
            b_y *= b_z * _sigmoid(b_z)
        tl.store(out + p, b_y.to(out.dtype.element_ty), mask=m)
    return h, dt_sum


@triton.jit
def _selective_scan_fwd_kernel(
    u,  # (batch, dim, L) input
    delta,  # (batch, dim, L) time step before bias / softplus
    A2,  # (dim, NP) fp32, A * log2(e), zero-padded states
    Bt,  # (batch, G, L, NP) fp32, B time-major
    Ct,  # (batch, G, L, NP) fp32, C time-major
    Dv,  # (dim,) fp32 skip weight, or None
    z,  # (batch, dim, L) gate, or None
    delta_bias,  # (dim,) fp32, or None
    init,  # (batch, dim, NP) fp32 initial state (padded), or None
    out,  # (batch, dim, L) output, u's dtype
    ckpt,  # (batch, dim, NCK, NP) fp32: state before each chunk, last entry the final state
    seg_state,  # (batch, NSEG, dim, NP) fp32 LOCAL: segment end state from zero, or None
    seg_dt,  # (batch, NSEG, dim) fp32 LOCAL: sum of dt over the segment, or None
    dim,  # channels
    L,  # sequence length
    N,  # states
    G,  # groups of B / C
    NCK,  # checkpoint entries = cdiv(L, CK) + 1
    SEG,  # chunks per segment (program axis 2)
    SOFTPLUS: tl.constexpr,  # dt = softplus(delta + bias)
    NP: tl.constexpr,  # padded states, power of two
    CK: tl.constexpr,  # checkpoint chunk length, multiple of TT
    BLOCK_D: tl.constexpr,  # channels per program
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    LOCAL: tl.constexpr,  # pass 1 of Note [selective scan segments]: from zero, no outputs
    TT: tl.constexpr,  # steps per loop iteration, divides CK
    SPLIT: tl.constexpr,  # several segments (program axis 2)
):
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    i_s = tl.program_id(2)
    NSEG = tl.num_programs(2)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NP)
    o_dn = o_d[:, None] * NP + o_n[None, :]  # (BLOCK_D, NP) in a (dim, NP) buffer

    b_A2 = tl.load(A2 + o_dn, mask=m_d[:, None], other=0.0)
    b_D = tl.load(Dv + o_d, mask=m_d, other=0.0) if HAS_D else None
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0) if HAS_BIAS else None

    row = (i_b * dim + o_d.to(tl.int64)) * L  # (BLOCK_D,) int64 offsets of the rows
    grp = (i_d * BLOCK_D) // (dim // G)  # a block never straddles two groups
    bc = (i_b * G + grp) * L * NP  # B_t / C_t of this program's group: broadcast loads
    p_B = Bt + bc + o_n  # (NP,)
    p_C = Ct + bc + o_n
    # entry c of channel d at p_ck + c * NP
    p_ck = ckpt + (i_b * dim + o_d.to(tl.int64))[:, None] * (NCK * NP) + o_n[None, :]

    NC = NCK - 1  # chunks
    c0 = i_s * SEG
    c1 = tl.minimum(c0 + SEG, NC)
    if SPLIT:
        t_beg = c0 * CK
        t_end = tl.minimum(c1 * CK, L)
    else:  # one segment: plain bounds (the min() bounds cost 17-20% of the time, H200)
        t_beg = 0
        t_end = L
    dt_sum = tl.zeros((BLOCK_D,), dtype=tl.float32)  # LOCAL only
    if LOCAL:
        h = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    elif i_s == 0:
        if HAS_INIT:
            h = tl.load(init + i_b * dim * NP + o_dn, mask=m_d[:, None], other=0.0)
        else:
            h = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    else:
        h = tl.load(p_ck + c0 * NP, mask=m_d[:, None], other=0.0)  # from the carry pass
    o_t = tl.arange(0, TT)
    for t0 in range(t_beg, t_end, TT):
        t0 = tl.multiple_of(t0, TT)
        if not LOCAL:
            if t0 % CK == 0:
                tl.store(p_ck + (t0 // CK) * NP, h, mask=m_d[:, None])
        h, dt_sum = _fwd_tile(
            h,
            b_A2,
            u,
            delta,
            z,
            out,
            b_bias,
            b_D,
            p_B,
            p_C,
            row,
            m_d,
            t0,
            t_end,
            o_t,
            dt_sum,
            SOFTPLUS,
            NP,
            TT,
            HAS_D,
            HAS_Z,
            HAS_BIAS,
            LOCAL,
        )
    if LOCAL:
        tl.store(seg_state + (i_b * NSEG + i_s) * (dim * NP) + o_dn, h, mask=m_d[:, None])
        tl.store(seg_dt + (i_b * NSEG + i_s) * dim + o_d, dt_sum, mask=m_d)
    elif c1 == NC:
        tl.store(p_ck + NC * NP, h, mask=m_d[:, None])  # the final entry


@triton.jit
def _selective_scan_fwd_carry_kernel(
    A2,  # (dim, NP) fp32
    init,  # (batch, dim, NP) fp32 initial state, or None
    seg_state,  # (batch, NSEG, dim, NP) fp32 segment end states from zero
    seg_dt,  # (batch, NSEG, dim) fp32 sum of dt per segment
    ckpt,  # (batch, dim, NCK, NP) fp32: writes the entries at segment starts
    dim,  # channels
    NCK,  # checkpoint entries
    NSEG,  # segments
    SEG,  # chunks per segment
    NP: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_INIT: tl.constexpr,
):
    """Pass 2 of Note [selective scan segments] for the 2-D kernel: h_{s+1} = exp(A * sum dt_s)
    h_s + local_s (the lane kernel's real pass does this itself, up to its own segment)."""
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NP)
    o_dn = o_d[:, None] * NP + o_n[None, :]
    b_A2 = tl.load(A2 + o_dn, mask=m_d[:, None], other=0.0)
    p_ck = ckpt + (i_b * dim + o_d.to(tl.int64))[:, None] * (NCK * NP) + o_n[None, :]
    if HAS_INIT:
        h = tl.load(init + i_b * dim * NP + o_dn, mask=m_d[:, None], other=0.0)
    else:
        h = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    for s in range(0, NSEG - 1):
        b_loc = tl.load(
            seg_state + (i_b * NSEG + s) * (dim * NP) + o_dn, mask=m_d[:, None], other=0.0
        )
        b_sdt = tl.load(seg_dt + (i_b * NSEG + s) * dim + o_d, mask=m_d, other=0.0)
        h = tl.exp2(b_sdt[:, None] * b_A2) * h + b_loc
        tl.store(p_ck + ((s + 1) * SEG) * NP, h, mask=m_d[:, None])


# "lane" (Note [selective scan forward lanes], ``triton_fwd_lane``) or "tile" (the 2-D kernel
# above); "tile" too once a lane kernel failed its layout check in this process
FWD_VARIANT = "lane"
# the lane kernel up to 32 padded states: at 64 the 2-D blocks' 4-state vectors need 16 lanes a
# channel, more than a tile's 8 steps, and the layout check rejects what Triton makes of it (bf16)
LANE_MAX_NP = 32


# the time-lane kernel (Note [selective scan forward time lanes]) instead of the segment split
# where the split would run (small batch x dim) and N = 16: off, slower than the split on the H200
# at every shape timed (2026-12-01: 1.20-1.37x its time at batch 1; the Note has the figures)
FWD_TIME_LANES = False
# ... and only with at least this many channels (warps): below it the segment split's parallelism
# wins (e.g. 64 channels x 65536 steps: 64 warps against the split's 2048)
TLANE_MIN_CHANNELS = 512
# where the time-lane kernel loads a tile's B / C rows (its ``BC_MODE``): 0 each where it is
# used, 1 all at the top of the iteration, 2 the next tile's a tile ahead. H200, 2026-12-02, CUDA
# graphs, bf16 ms 0 / 1 / 2: (1, 1536, 4096) 0.146 / 0.129 / 0.135, (1, 1024, 65536) 1.259 /
# 1.359 / 1.366 (fp32 alike); no mode is faster than the segment split (0.116, 1.045), so the
# kernel stays off and the mode at 0. With 16-bit rows (``TLANE_BC16``) mode 2 is its fastest
# form: 2026-12-04, (1, 1536, 4096) bf16 0.114 against the split's 0.098 (Note [selective scan
# forward time lanes])
TLANE_BC_MODE = 0
# warps per channel of the time-lane kernel (its ``W``: 1 or 2), each with its own time lanes
TLANE_WARPS = 1
# the time-lane kernel's B / C rows in the inputs' 16-bit dtype where B and C have it (its
# ``BC16``; Note [selective scan forward 16-bit rows]): off with the kernel; with it, 16-bit rows
# are 10% faster in mode 2 and slower in modes 0 / 1 (Note [selective scan forward time lanes])
TLANE_BC16 = False
# two channels a warp in the time-lane kernel (``triton_fwd_tlane._selective_scan_fwd_tlane2_kernel``)
# where it can: one warp a channel (TLANE_WARPS 1), the rows loaded a tile at a time (TLANE_BC_MODE
# 1 or 2) and an even number of channels a B / C group. 2026-12-04, (1, 1536, 4096), mode 2: fp32
# 0.110 ms (one channel 0.142, the split 0.106), bf16 0.1305 (0.114, 0.0985); off with the kernel
TLANE_CH2 = False
# the time-lane forward as one program a (channel, tile), the tiles chained by a look-back
# (``triton_fwd_tchain``, Note [selective scan forward time-lane chain]); with FWD_TIME_LANES.
# Off: 2026-12-04, (1, 1536, 4096) bf16 0.166 ms with 16-bit rows (the split 0.098), and 0.104
# even without its chain (the Note)
TLANE_CHAIN = False
# extra launch options of the time-lane kernel (e.g. {"maxnreg": 128}), for the benchmark
TLANE_OPTIONS: dict[str, int] = {}


def steps_per_tile(NP: int) -> int:
    """TT (Note [selective scan forward layout]): 8 steps, NP when smaller."""
    return min(NP, 8)


# the lane forward's y reduced over a tile's 4 lanes once per tile, not per step (its
# ``Y_SCATTER``, ``triton_fwd_lane._y_scatter``; 16 states)
LANE_Y_SCATTER = True

# the real pass of a split lane forward capped at this many registers when it runs more than
# LANE_SPLIT_CAP_WAVES waves of the programs that many registers fit on a multiprocessor (8
# two-warp programs at 128): with ``Y_SCATTER`` the split kernel takes 130 (bf16 and fp32; 136
# allocated: 7 programs), which costs whole waves there. H200, 2026-12-02, CUDA graphs, forward
# ms, scatter / scatter capped: (1, 1024, 65536) (4096 programs, 3.9 waves of 8 per
# multiprocessor) fp32 1.188 / 1.082, bf16 1.097 / 1.045; (1, 1536, 4096) (1536 programs, 1.5
# waves) fp32 0.125 / 0.128, bf16 0.112 / 0.116, so uncapped there
LANE_SPLIT_REGS = 128
LANE_SPLIT_CAP_WAVES = 2

# tiles ahead the lane forward loads u, delta and z (its ``AHEAD``: 1 or 2; B / C one). 2 moves
# those loads from late in the iteration (where ptxas puts them at 1) to its top; against the
# global-load waits Nsight Compute shows it did not help: H200, 2026-12-02, CUDA graphs, forward
# ms, 1 / 2: (8, 4096, 2048) fp32 0.642 / 0.751, bf16 0.588 / 0.597; (16, 1536, 1024) 0.288 /
# 0.352, 0.246 / 0.249; (1, 1536, 4096) 0.126 / 0.128, 0.113 / 0.115; (1, 1024, 65536) 1.078 /
# 1.077, 1.031 / 1.023. So 1
LANE_AHEAD = 1

# the lane forward loads the next tile's B / C row j right after the current tile's step j, into
# the registers row j leaves (its ``BC_ROLL``; with LANE_AHEAD = 1). Nsight Compute (2026-12-02,
# (1, 1536, 4096) bf16, per-instruction stall samples) put 32% of the local pass's and 20% of
# the real pass's warp stalls on the register copies at the loop's end that moved the next
# tile's rows, loaded a few instructions earlier, into the current tile's registers; rolled,
# those copies are gone (sm_90: 35 -> 9 MOV a tile, 46.1 -> 42.8 instructions a thread-step,
# 130 -> 122 / 80 -> 64 registers; ptxas still issues the loads late in the iteration). H200,
# 2026-12-02, CUDA graphs, forward ms, carried tile / rolled (``device_seventeenth3.sh``):
# (8, 4096, 2048) fp32 0.641 / 0.622, bf16 0.588 / 0.587; (16, 1536, 1024) 0.287 / 0.280, 0.247
# / 0.242; (1, 1536, 4096) 0.126 / 0.123, 0.113 / 0.109; (1, 1024, 65536) 1.075 / 1.044, 1.027
# / 0.958
LANE_BC_ROLL = True

# the lane forward's broadcasts of a tile's dt and dt * u from one inline asm
# (``triton_fwd_lane._tile_bcast``, its ``BCAST_TILE``): 0 never, 1 for 16-bit inputs, 2 always.
# A shuffle per step let Triton's layout pass compute the softplus chain twice with 16-bit inputs
# (sm_90 SASS at (1, 1536, 4096) bf16: 42.8 -> 41.0 instructions a thread-step in the real pass,
# 31.1 -> 28.8 in the local one, 4.62 -> 4.5 MUFU.EX2 a step); fp32 had no second chain (38.5 ->
# 39.1 at (8, 4096, 2048), the same at batch 1). H200, 2026-12-03, CUDA graphs, forward ms, 0 /
# 1 / 2 (``device_eighteenth1.sh``): bf16 (1, 1536, 4096) 0.112 / 0.108 / 0.108, (1, 1024, 65536)
# 0.958 / 0.920 / 0.921, (8, 4096, 2048) 0.586 / 0.576 / 0.577, (16, 1536, 1024) 0.236 / 0.237 /
# 0.238; fp32 0.123 / 0.123 / 0.122, 1.040 / 1.040 / 1.037, 0.621 / 0.621 / 0.623, 0.279 / 0.278 /
# 0.279. The backward's states kernel follows it (``bcast_tile``): bf16 forward+backward at
# (1, 1024, 65536) 4.252 -> 4.177 ms (``device_eighteenth4.sh``)
LANE_BCAST_TILE = 1

# segments of the split lane forward (Note [selective scan segments]) where it splits L, of
# whole tiles (the kernel's ``SEG_T``): -1 as many as fill the real pass's waves (``fill_waves``),
# N > 0 about N; 0 as ``triton_common.segments`` picks them, in checkpoint chunks. H200,
# 2026-12-03, CUDA graphs, forward ms (``device_eighteenth1.sh``, call 2), segments: (1, 1536,
# 4096) (96 programs a segment, 1056 a wave) bf16 16 chunks 0.108, 11 tiles-segments (1 wave)
# 0.101, 12-14 0.110-0.116, 20-22 (2 waves) 0.102, 24 0.110 (fp32 0.122 / 0.116 / 0.126-0.134 /
# 0.115 / 0.130); (1, 1024, 65536) (64 a segment) 64 chunks (3.9 waves) 0.920 / 1.040, 66 (4
# waves) 0.898 / 1.020, 70 0.928 / 1.077; (2, 1536, 4096) 16 chunks (2.9 waves) 0.185, 33 and
# more 3-90% slower
LANE_SEGMENTS = -1

# the lane forward's real pass with two channels a thread (``triton_fwd_lane2``, Note [selective
# scan forward two channels a thread]) where its geometry allows (KL = 4 lanes of 2 steps, the
# library's default loads): 0 off, 1 on (H200, 2026-12-03: forward 2-20% faster at the batch-1
# and (16, 1536, 1024) rows, the same at (8, 4096, 2048), where ``ch2_fills`` keeps it off)
LANE_CH2 = 1
# local segments per real segment where the forward splits L into segments of whole tiles (the
# kernels' ``FOLD``; where it divides a segment's tiles, else 1): the local pass runs that many
# times as many, shorter segments (those of the last real segment not at all), the real pass
# folds as many more states. The segments are planned for the real pass's waves, which leaves
# the local pass (64 registers, twice the programs a multiprocessor) short of its own: at (1,
# 1536, 4096) 1440 programs, 0.68 of a wave, 25% achieved occupancy (Nsight Compute). H200,
# 2026-12-04, CUDA graphs, forward ms (``device_twentysixth4.sh`` / ``5``), 1 / 2 / 4: (1, 1536,
# 4096) bf16 0.0982 / 0.0956 / 0.0997, fp32 0.1056 / 0.1057 / 0.1095; with the fold 8 segments
# at a time (LANE_FOLD_GROUP) 2: bf16 0.0987 -> 0.0938, fp32 0.1063 -> 0.1047 (local pass 39.6
# -> 34.8 us at 38% occupancy, real pass 54.6 -> 53.8 us); (1, 1024, 65536) bf16 0.865 -> 0.841,
# fp32 0.955 -> 0.939 (the fold's share); (16, 1536, 1024), (8, 4096, 2048): unchanged
LANE_LOCAL_FINE = 2
# the two-channel real pass's fold: segments whose states it loads at a time for both halves
# (its ``FOLD_GROUP``, ``triton_fwd_lane2._fold_pair``); 0: each half by ``fold_segments``, four
# at a time, one half after the other. Twice the local segments made that fold the real pass's
# longest wait (54.6 -> 57.5 us at (1, 1536, 4096) bf16); loaded 8 at a time for both halves:
# 53.8. H200, 2026-12-04, forward ms with LANE_LOCAL_FINE 2, groups 0 / 4 / 8 / 16: bf16 0.0962
# / 0.0946 / 0.0938 / 0.1062, fp32 0.1065 / 0.1058 / 0.1047 / 0.1297 (16: the loads' registers)
LANE_FOLD_GROUP = 8
# local segments of their own length, this many tiles (0: off), instead of LANE_LOCAL_FINE per
# real segment: their boundaries need not be the real segments' (the kernels' ``SNAP``, Note
# [selective scan segments]). Meant to fill the local pass's waves exactly (22 tiles: 2112
# programs at (1, 1536, 4096), one wave at 64 registers); its snapshot costs registers (80: 12
# programs a multiprocessor, not 16) and every length was slower. H200, 2026-12-04, CUDA graphs,
# forward ms (``device_twentyseventh1.sh``), library / 16 / 20 / 22 / 24 / 26 / 28 / 30 tiles:
# bf16 0.0931 / 0.0953 / 0.0951 / 0.0946 / 0.0971 / 0.0963 / 0.0981 / 0.0954, fp32 0.1038 /
# 0.1054 / 0.107 / 0.1075 / 0.1094 / 0.1109 / 0.1119 / 0.1049 (local pass 34.3 us against 36.3
# at 22 tiles); with the local pass capped at 72 registers (LANE_LOCAL_MAXNREG, 0: none), 22 /
# 26 tiles: bf16 0.0968 / 0.0952
LANE_LOCAL_TILES = 0
LANE_LOCAL_MAXNREG = 0
# the lane forward's loop without masks where every tile is whole and every program's channels
# exist (the kernels' ``EVEN``: L % TT == 0, dim a multiple of a program's channels), with 32-bit
# row offsets where batch * dim * L < 2^31 (``I32``; LANE_I32) and u, delta, z loaded
# LANE_EVEN_AHEAD tiles ahead (the kernels' ``AHEAD``; B / C rows one): without masks ptxas sinks
# the next tile's loads to the end of the loop. 0 never, 1 where L is not split, 2 everywhere.
# sm_90 SASS at (1, 1536, 4096) bf16: 38.1 -> 36.5 instructions a channel-step in the real pass,
# 28.2 -> 27.0 a step in the local one. Faster unsplit, slower split, though: H200, 2026-12-04,
# CUDA graphs, forward ms (``device_twentyseventh2.sh`` / ``3.sh``), masks / none, loads one tile
# ahead / none, two ahead: (1, 1536, 4096) bf16 0.0932 / 0.0999 / 0.0979 (local pass 34.3 / 38.5
# / 36.6 us, real pass 52.2 / 54.6 / 54.3), fp32 0.1045 / 0.1047 / 0.1063; (1, 1024, 65536) bf16
# 0.842 / 0.882 / 0.874; (8, 4096, 2048) bf16 0.534 / 0.541 / 0.502, fp32 0.617 / 0.610 / 0.610;
# (16, 1536, 1024) bf16 0.208 / 0.204 / 0.204. Hence 1
LANE_EVEN = 1
LANE_I32 = True
LANE_EVEN_AHEAD = 2
# with the unmasked loop, masks kept on its loads (the kernels' ``LDM``): 0 none, 1 the channel
# mask, 2 also u's, delta's and z's step masks; the steps' arithmetic stays without. Why: Nsight
# Compute put the split passes' loss without masks in long-scoreboard stalls (local pass 18% ->
# 39-47% of its samples, real pass 14% -> 23-40%): ptxas moves the unmasked loads of the next
# tile to the loop's end, where the register rotation waits on them (masked, they stay near the
# top). Masks on the loads bring them back up in sm_90 SASS (the local pass with LDM, the real
# pass only with 64-bit offsets), but the split passes stayed slower: H200, 2026-12-04, CUDA
# graphs, (1, 1536, 4096) bf16 forward ms (``device_twentyeighth3.sh``), masks 0.0931 against
# 0.0948-0.0965 over 7 settings of LDM / I32 / AHEAD (those below per pass included; real pass
# 51.9 us against 53.6-55.3, local 34.4 against 34.7-35.4). Unsplit, LDM 1 against 0
# (``device_twentyeighth4.sh``, 5 rounds): (8, 4096, 2048) bf16 0.491 / 0.501, fp16 0.505 /
# 0.500, fp32 0.618 / 0.611; (16, 1536, 1024) bf16 0.201 / 0.203, fp16 0.201 / 0.203, fp32
# 0.224 / 0.224: 1-2% in bf16 only, ptxas's scheduling luck more than a mechanism, so 0
LANE_EVEN_LDM = 0
# the real pass's own I32 / AHEAD / LDM where the loop runs without masks (-1: the local pass's;
# e.g. 64-bit offsets there keep its loads near the loop's top)
LANE_REAL_I32 = -1
LANE_REAL_AHEAD = -1
LANE_REAL_LDM = -1
# its register cap (0: none), and the registers its segments are planned for (``fill_waves``:
# sm_90 compiles it to 159-161, 6 two-warp programs a multiprocessor)
LANE_CH2_REGS = 0
LANE_CH2_WAVE_REGS = 160

# the lane forward's B / C rows (``prep_BC_lane``'s copies) in the inputs' 16-bit dtype where B
# and C are 16-bit floats of u's dtype (an exact copy), converted to fp32 where a step uses them
# (Note [selective scan forward 16-bit rows] in ``triton_fwd_lane``): 0 never (fp32 rows), 1
# wherever they can be, 2 only where the fewer registers let an unsplit forward's two-channel
# real pass fill its waves (``ch2_rows16``). H200, 2026-12-03, forward ms under CUDA graphs,
# bf16, 16-bit rows everywhere against fp32 rows (``device_twentyfourth1.sh``): (8, 4096, 2048)
# 0.535 / 0.571 (the two-channel pass then fills 0.97 of a wave instead of 1.29 waves),
# (16, 1536, 1024) 0.215 / 0.207, (1, 1536, 4096) 0.1016 / 0.098, (1, 1024, 65536) 0.878 / 0.860:
# hence 2
LANE_BC16 = 2
# the registers the two-channel real pass's segments are planned for with 16-bit rows (sm_90
# compiles it to 128 at bf16, 8 two-warp programs a multiprocessor)
LANE_CH2_WAVE_REGS16 = 128

# extra launch options of the lane kernel (e.g. {"maxnreg": 96}): none by default; a module
# constant so that the benchmark can time register caps (H200, 2026-12-02: caps of 104 .. 80
# registers, which would fit the real pass's 1.45 waves at batch 1 into one, were all slower,
# up to 2.3x at 80: benchmarks/RESULTS.md, fifteenth session)
LANE_OPTIONS: dict[str, int] = {}
# ... and of the split forward's one-channel local pass alone, on top of those: none by default.
# H200, 2026-12-04, CUDA graphs, forward ms (``device_thirtieth2.sh`` / ``3.sh``, 5 rounds, the
# library 0.0933 / 0.0934 bf16, 0.1042 / 0.1044 fp32 at (1, 1536, 4096)): {BC_JIT: 1, BC_ROLL: 0}
# (its B rows loaded in the tile that uses them: 48 registers instead of 64, 21 programs a
# multiprocessor instead of 16) bf16 0.0998, fp32 0.1076 (local pass 41.2 us against 34.5: the
# rows' latency shows); {BC_SMEM: 1, BC_ROLL: 0} (rows a tile ahead through shared memory) bf16
# 0.0964, fp32 0.106; with it capped at 40 registers (LANE_LOCAL_MAXNREG, no spills: 25 programs
# a multiprocessor, the 2880 local programs in one wave) bf16 0.0939 (local 35.0 us), fp32 0.1023
# (local 37.1 against 39.3); (1, 1024, 65536) fp32 0.9179 (capped 0.9256) against 0.9377, bf16 the
# same (0.8441-0.8447 against 0.8413).
# The fp32 gain (1-2%) is left off, as the 32-bit offsets' were (RESULTS, thirtieth session).
LANE_LOCAL_OPTIONS: dict[str, int] = {}

# tiles per iteration of the lane forward's loop, (real pass, local pass): 2 unrolls it (no
# register copies of the prefetched next tile, but 168 registers for the real pass); no variant
# was faster on the H200 (benchmarks/RESULTS.md, fourteenth session), so off
FWD_UNROLL: tuple[int, int] = (1, 1)


# warps per forward program (and per program of the lane kernels that share its tiles: the
# backward's states and local passes); a module constant so that the benchmark can time others.
# 2: finer-grained scheduling of a partial last wave (at (16, 1536, 1024, 16) 768 four-warp
# programs on 528 slots); H200, 2026-12-01, bf16 forward there 0.291 -> 0.286 ms (mamba-ssm
# 0.431: 0.68 -> 0.66), 0.299 -> 0.295 fp32, the other benchmark shapes within 1% either way
# (1 warp timed the same as 2)
FWD_WARPS = 2


def fwd_block_channels(
    batch: int, dim: int, G: int, NP: int, per_channel: int | None = None
) -> tuple[int, int]:
    """(BLOCK_D, num_warps) of the forward: ``FWD_WARPS`` warps of NP / 4 threads per channel
    (``per_channel`` if given; at the default 2 warps BLOCK_D = 16 at NP = 16), fewer channels
    for grouped B / C so that a block never straddles two groups."""
    if per_channel is None:
        per_channel = max(1, min(NP // 4, 32))  # threads per channel
    warps = FWD_WARPS
    block_d = max(1, warps * 32 // per_channel)
    if G > 1:
        per_group = int(dim) // G  # specialized, as N and G (``launch``)
        limit = per_group & -per_group  # largest power of two dividing it
        if limit < block_d:
            block_d = limit
            warps = max(1, min(FWD_WARPS, block_d * per_channel // 32))
    return block_d, warps


@functools.cache
def _sm_count(index: int | None) -> int:
    """Multiprocessors of CUDA device ``index`` (None: the current one)."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def split_cap(programs: int, warps: int, device: torch.device) -> dict[str, int]:
    """The split lane forward's real-pass launch options: ``maxnreg`` = ``LANE_SPLIT_REGS`` when
    its ``programs`` (of ``warps`` warps) run more than ``LANE_SPLIT_CAP_WAVES`` waves at that
    many registers on ``device`` (CUDA; none elsewhere or when ``LANE_OPTIONS`` sets one)."""
    if not LANE_SPLIT_REGS or "maxnreg" in LANE_OPTIONS or device.type != "cuda":
        return {}
    per_sm = 65536 // (LANE_SPLIT_REGS * 32 * warps)
    if programs > LANE_SPLIT_CAP_WAVES * per_sm * _sm_count(device.index):
        return {"maxnreg": LANE_SPLIT_REGS}
    return {}


def _per_wave(regs: int, warps: int, device: torch.device) -> int:
    """Programs of ``warps`` warps at ``regs`` registers a thread that one wave of CUDA
    ``device`` holds (at least one a multiprocessor)."""
    return max(1, 65536 // (regs * 32 * warps)) * _sm_count(device.index)


def fill_waves(
    per_segment: int, nseg: int, warps: int, device: torch.device, regs: int | None = None
) -> int:
    """The segments of a split lane forward of ``per_segment`` programs (of ``warps`` warps) a
    segment for which ``triton_common.segments`` picks ``nseg``: as many as fill the whole waves
    that nseg segments' real pass starts (``LANE_SPLIT_REGS`` registers a thread, as
    ``split_cap`` counts them; the measured waves: ``LANE_SEGMENTS``), nseg where those are one
    wave or less (more segments there would only add folds) or not on CUDA. ``regs``: the real
    pass's registers a thread if not ``LANE_SPLIT_REGS`` (the two-channel real pass's)."""
    if device.type != "cuda":
        return nseg
    per_wave = _per_wave(regs or LANE_SPLIT_REGS, warps, device)
    waves = cdiv(per_segment * nseg, per_wave)
    return nseg if waves <= 1 else waves * per_wave // per_segment  # >= nseg: waves were rounded up


def wave_fill(programs: int, regs: int, warps: int, device: torch.device) -> float:
    """The fraction of its waves' program slots that ``programs`` (of ``warps`` warps, ``regs``
    registers a thread) fill on CUDA ``device``."""
    per_wave = _per_wave(regs, warps, device)
    return programs / (cdiv(programs, per_wave) * per_wave)


def ch2_fills(
    programs: int, programs2: int, warps: int, device: torch.device, regs2: int | None = None
) -> bool:
    """Whether an unsplit forward takes the two-channel real pass (``programs2`` programs)
    rather than the one-channel one (``programs``): where its waves are as full or fuller
    (``regs2``, default ``LANE_CH2_WAVE_REGS``, against ``LANE_SPLIT_REGS`` registers; Note
    [selective scan forward two channels a thread]); always off CUDA (the interpreter tests
    run it)."""
    if device.type != "cuda":
        return True
    return wave_fill(programs2, regs2 or LANE_CH2_WAVE_REGS, warps, device) >= wave_fill(
        programs, LANE_SPLIT_REGS, warps, device
    )


def ch2_rows16(
    programs: int, programs2: int, warps: int, device: torch.device, rows16: bool
) -> tuple[bool, bool]:
    """(two channels a thread, 16-bit rows) of an unsplit lane forward whose geometry allows
    both (``rows16``: ``bc_rows16`` found a 16-bit dtype): the two-channel pass where it fills
    its waves as well as the one-channel pass (``ch2_fills``), with fp32 rows where they do
    (``LANE_CH2_WAVE_REGS``), else with 16-bit rows where those do (``LANE_CH2_WAVE_REGS16``:
    ``LANE_BC16`` = 2) or wherever they can be (1). Note [selective scan forward 16-bit rows]."""
    if not rows16:
        return ch2_fills(programs, programs2, warps, device), False
    if LANE_BC16 == 1:
        return ch2_fills(programs, programs2, warps, device, LANE_CH2_WAVE_REGS16), True
    if ch2_fills(programs, programs2, warps, device):
        return True, False
    if ch2_fills(programs, programs2, warps, device, LANE_CH2_WAVE_REGS16):
        return True, True
    return False, False


def bc_rows16(
    u: torch.Tensor, B: torch.Tensor, C: torch.Tensor, NP: int, KL: int
) -> torch.dtype | None:
    """The 16-bit dtype of the lane forward's B / C rows (``LANE_BC16``), or None for fp32
    rows: B and C both of u's 16-bit dtype (the copy is exact), the library's default loads
    (``LANE_OPTIONS`` holds the experiments that read the rows another way), and for bf16 an
    even number of states a lane (they travel in pairs)."""
    dt = u.dtype
    if not LANE_BC16 or LANE_OPTIONS or dt not in (torch.bfloat16, torch.float16):
        return None
    if B.dtype != dt or C.dtype != dt:
        return None
    if dt == torch.bfloat16 and (NP // KL) % 2:
        return None
    return dt


def bcast_tile(dtype: torch.dtype) -> bool:
    """The lane kernels' ``BCAST_TILE`` for inputs of ``dtype`` (``LANE_BCAST_TILE``)."""
    return LANE_BCAST_TILE == 2 or (LANE_BCAST_TILE == 1 and dtype != torch.float32)


def plan_knobs() -> tuple:
    """The module settings the forward's launches depend on (part of every eager plan's key,
    Note [eager launch plans]; ``tests/ops/common/test_launch_plan.py`` checks that every
    module-level setting of the launch modules is here or declared a constant)."""
    from ssmscan.ops.selective_scan import shapes, triton_fwd_lane

    tc = triton_common
    return (
        FWD_VARIANT, LANE_MAX_NP, FWD_WARPS, FWD_TIME_LANES, TLANE_MIN_CHANNELS, TLANE_BC_MODE,
        TLANE_WARPS, TLANE_BC16, TLANE_CH2, TLANE_CHAIN, tuple(TLANE_OPTIONS.items()),
        CHECKPOINT_LEN,
        tuple(LANE_OPTIONS.items()), tuple(LANE_LOCAL_OPTIONS.items()), FWD_UNROLL, LANE_Y_SCATTER,
        LANE_AHEAD, LANE_BC_ROLL,
        LANE_BCAST_TILE, LANE_SEGMENTS, LANE_CH2, LANE_CH2_REGS, LANE_LOCAL_FINE, LANE_FOLD_GROUP,
        LANE_LOCAL_TILES, LANE_LOCAL_MAXNREG,
        LANE_EVEN, LANE_I32, LANE_EVEN_AHEAD, LANE_EVEN_LDM, LANE_REAL_I32, LANE_REAL_AHEAD,
        LANE_REAL_LDM,
        LANE_CH2_WAVE_REGS, LANE_BC16, LANE_CH2_WAVE_REGS16,
        LANE_SPLIT_REGS, LANE_SPLIT_CAP_WAVES,
        shapes.CHECKPOINT_LEN, tc.TARGET_WARPS, tc.SPLIT_BELOW_WARPS, tc.FWD_TARGET_WARPS,
        tc.TILE_T, triton_fwd_lane.LP_ALIGN,
    )  # fmt: skip


@planned(plan_knobs)
def forward(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    delta_softplus: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, last_state, checkpoints), fresh (``shapes.empty_forward_outputs``), from the
    kernels; in eager through recorded plans (Note [eager launch plans])."""
    outs = empty_forward_outputs(u, A)
    launch(u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus, *outs)
    return outs


def _time_lanes_off(e: Exception) -> None:
    global FWD_TIME_LANES
    FWD_TIME_LANES = False
    warnings.warn(f"{e}; using the segment split from now on", stacklevel=3)


def _launch_tlane(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    delta_softplus: bool,
    out: torch.Tensor,
    last_state: torch.Tensor,
    checkpoints: torch.Tensor,
) -> None:
    """The forward by ``triton_fwd_tlane`` (Note [selective scan forward time lanes]):
    ``TLANE_WARPS`` warps per channel, or two channels a warp (``TLANE_CH2``, where it applies),
    16-bit B / C rows with ``TLANE_BC16``, N = 16, into ``checkpoints`` and ``last_state``
    directly."""
    batch, dim, L = u.shape
    G = int(num_groups(B))
    LP = triton_fwd_tlane.tile_steps(L, TLANE_WARPS)
    rows16 = u.dtype if TLANE_BC16 and B.dtype == C.dtype == u.dtype != torch.float32 else None
    Bt, Ct = prep_BC_lane(B, C, batch, 16, LP, rows16 or torch.float32)
    bc16 = 0 if rows16 is None else 1 if rows16 == torch.bfloat16 else 2
    if bc16 == 1:  # bf16 pairs as int32 words (Note [selective scan forward 16-bit rows])
        Bt, Ct = Bt.view(torch.int32), Ct.view(torch.int32)
    a_raw = u.dtype != torch.float32 and A.dtype == torch.float32 and A.is_contiguous()
    init = initial_state.contiguous() if initial_state is not None else None
    xchg = None  # two warps' maps, per channel (``triton_fwd_tlane._warp_maps``)
    if TLANE_WARPS == 2:
        xchg = torch.empty((batch, dim, 2, 2, 2, 16), dtype=torch.float32, device=u.device)
    if TLANE_CHAIN:  # Note [selective scan forward time-lane chain]
        T = cdiv(L, triton_fwd_tlane.TILE)
        flags = torch.zeros((batch, dim, T), dtype=torch.int32, device=u.device)
        maps = torch.empty((batch, dim, T, 2, 16), dtype=torch.float32, device=u.device)
        ends = torch.empty((batch, dim, T, 16), dtype=torch.float32, device=u.device)
        launcher(triton_fwd_tchain._selective_scan_fwd_tchain_kernel, triton_fwd_tlane.check_tlane_layout())[
            (dim, batch, T)
        ](
            u.contiguous(), delta.contiguous(), A if a_raw else prep_A(A, 16), Bt, Ct,
            as_f32(D) if D is not None else None, z.contiguous() if z is not None else None,
            as_f32(delta_bias) if delta_bias is not None else None, init, out, checkpoints,
            last_state, flags, maps, ends, dim, L, LP, G, checkpoints.shape[2], T,
            SOFTPLUS=delta_softplus, NP=16, CK=CHECKPOINT_LEN, HAS_D=D is not None,
            HAS_Z=z is not None, HAS_BIAS=delta_bias is not None,
            HAS_INIT=initial_state is not None, A_RAW=a_raw, BC16=bc16, num_warps=1,
            **TLANE_OPTIONS,
        )  # fmt: skip
        return
    if TLANE_CH2 and TLANE_WARPS == 1 and TLANE_BC_MODE in (1, 2) and (dim // G) % 2 == 0:
        launcher(triton_fwd_tlane._selective_scan_fwd_tlane2_kernel, triton_fwd_tlane.check_tlane_layout())[
            (dim // 2, batch)
        ](
            u.contiguous(), delta.contiguous(), A if a_raw else prep_A(A, 16), Bt, Ct,
            as_f32(D) if D is not None else None, z.contiguous() if z is not None else None,
            as_f32(delta_bias) if delta_bias is not None else None, init, out, checkpoints,
            last_state, dim, L, LP, G, checkpoints.shape[2], SOFTPLUS=delta_softplus, NP=16,
            CK=CHECKPOINT_LEN, HAS_D=D is not None, HAS_Z=z is not None,
            HAS_BIAS=delta_bias is not None, HAS_INIT=initial_state is not None, A_RAW=a_raw,
            PREFETCH_L1=not is_wrap_triton_enabled(), BC_MODE=TLANE_BC_MODE, BC16=bc16,
            num_warps=1, **TLANE_OPTIONS,
        )  # fmt: skip
        return
    launcher(triton_fwd_tlane._selective_scan_fwd_tlane_kernel, triton_fwd_tlane.check_tlane_layout())[
        (dim, batch)
    ](
        u.contiguous(), delta.contiguous(), A if a_raw else prep_A(A, 16), Bt, Ct,
        as_f32(D) if D is not None else None, z.contiguous() if z is not None else None,
        as_f32(delta_bias) if delta_bias is not None else None, init, out, checkpoints,
        last_state, xchg, dim, L, LP, G, checkpoints.shape[2], SOFTPLUS=delta_softplus, NP=16,
        CK=CHECKPOINT_LEN, HAS_D=D is not None, HAS_Z=z is not None,
        HAS_BIAS=delta_bias is not None, HAS_INIT=initial_state is not None, A_RAW=a_raw,
        PREFETCH_L1=not is_wrap_triton_enabled(), BC_MODE=TLANE_BC_MODE, W=TLANE_WARPS, BC16=bc16,
        num_warps=TLANE_WARPS, **TLANE_OPTIONS,
    )  # fmt: skip


def _ch2_real(consts: dict, dim: int, block_d: int, batch: int, nseg: int, KL: int) -> tuple:
    """(launcher, grid, constexprs) of the real pass with two channels a thread."""
    drop = ("Y_SCATTER", "BC_ROLL")
    real = launcher(_selective_scan_fwd_lane2_kernel, check_lane_layout(KL, True))
    grid = (cdiv(dim, 2 * block_d), batch, nseg)
    extra = {k: v for k, v in consts.items() if k not in drop}
    extra.update({"maxnreg": LANE_CH2_REGS} if LANE_CH2_REGS else {})
    extra.update({"FOLD_GROUP": LANE_FOLD_GROUP} if LANE_FOLD_GROUP else {})
    if extra.get("EVEN") and dim % (2 * block_d):  # a program's channels: 2 BLOCK_D
        extra.update(EVEN=False, AHEAD=1, I32=False, LDM=0)
    return real, grid, extra


def launch(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    delta_softplus: bool,
    out: torch.Tensor,
    last_state: torch.Tensor,
    checkpoints: torch.Tensor,
) -> None:
    """Run the forward into the preallocated ``out``, ``last_state``, ``checkpoints``
    (``shapes.empty_forward_outputs``). Inputs may have any strides."""
    global FWD_VARIANT
    args = (u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus)
    try:
        _launch(*args, out, last_state, checkpoints)
    except LaneLayoutError as e:  # checked before its first launch: nothing was written
        FWD_VARIANT = "tile"
        warnings.warn(f"{e}; using the 2-D forward kernel from now on", stacklevel=2)
        _launch(*args, out, last_state, checkpoints)


def _launch(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    delta_softplus: bool,
    out: torch.Tensor,
    last_state: torch.Tensor,
    checkpoints: torch.Tensor,
) -> None:
    if u.dtype == torch.float64:
        # no float64 Triton path: the float64 C kernel on host copies (correct, not fast)
        from ssmscan.ops.selective_scan import cpu  # noqa: F401  (registers the op)

        host = [
            t.cpu() if t is not None else None
            for t in (u, delta, A, B, C, D, z, delta_bias, initial_state)
        ]
        res = torch.ops.ssmscan.selective_scan_fwd_cpu(*host, delta_softplus)
        for dst, src in zip((out, last_state, checkpoints), res):
            dst.copy_(src)
        return
    if u.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(
            f"ssmscan selective_scan Triton kernels take float32/16, bfloat16 or float64 u; got {u.dtype}"
        )
    batch, dim, L = u.shape
    # N and G pick constexprs (NP, the block): int() specializes them when the sizes are symbolic
    # (torch.compile(dynamic=True)); next_power_of_2 on a SymInt is a bitwise expression sympy
    # cannot cope with (the compile ran for minutes, then crashed)
    N = int(A.shape[1])
    NP = pad_states(N)
    G = int(num_groups(B))
    NCK = checkpoints.shape[2]
    lane = FWD_VARIANT == "lane" and NP <= LANE_MAX_NP
    if lane:
        KL, TPL = lane_geometry(NP)
        TT = KL * TPL
    else:
        TT = steps_per_tile(NP)
    assert CHECKPOINT_LEN % TT == 0 and NCK == num_checkpoints(L), (NCK, L)
    assert out.shape == (batch, dim, L) and last_state.shape == (batch, dim, N)
    block_d, warps = fwd_block_channels(batch, dim, G, NP, KL if lane else None)
    # B / C time-padded for the lane kernel, one more tile for its prefetch
    LP = padded_steps(L, TT) if lane else L
    nblk = cdiv(dim, block_d)
    nseg, seg = segments(batch * nblk * warps, NCK - 1, triton_common.FWD_TARGET_WARPS)
    seg_t = lane and nseg > 1 and LANE_SEGMENTS != 0
    # the real pass with two channels a thread (Note [selective scan forward two channels a
    # thread]): its geometry, the library's default loads, a program within one group
    ch2 = (
        lane
        and bool(LANE_CH2)
        and (KL, TPL) == (4, 2)
        and LANE_Y_SCATTER
        and LANE_BC_ROLL
        and LANE_AHEAD == 1
        and not LANE_OPTIONS
        and (G == 1 or (dim // G) % (2 * block_d) == 0)
    )
    rows16 = bc_rows16(u, B, C, NP, KL) if lane else None
    # a split forward plans for 16-bit rows only where it always takes them (LANE_BC16 = 1)
    regs2 = LANE_CH2_WAVE_REGS16 if rows16 is not None and LANE_BC16 == 1 else LANE_CH2_WAVE_REGS
    if seg_t:  # segments of whole tiles instead (LANE_SEGMENTS)
        if LANE_SEGMENTS > 0:
            want = LANE_SEGMENTS
        elif ch2:
            nblk2 = cdiv(dim, 2 * block_d)
            want = fill_waves(batch * nblk2, nseg, warps, u.device, regs2)
        else:
            want = fill_waves(batch * nblk, nseg, warps, u.device)
        seg = cdiv(cdiv(L, TT), want)
        nseg = cdiv(cdiv(L, TT), seg)
    if ch2 and nseg == 1:  # unsplit: as its waves fill against the one-channel pass's
        ch2, r16 = ch2_rows16(
            batch * nblk, batch * cdiv(dim, 2 * block_d), warps, u.device, rows16 is not None
        )
        rows16 = rows16 if r16 else None
    elif LANE_BC16 == 2:  # split, or the one-channel pass: fp32 rows
        rows16 = None
    f32 = torch.float32
    dev = u.device
    if (
        FWD_TIME_LANES
        and lane
        and batch * nblk * warps < triton_common.SPLIT_BELOW_WARPS  # the split's regime
        and batch * dim >= TLANE_MIN_CHANNELS
        and N == 16
        and L > 0
        and CHECKPOINT_LEN % (triton_fwd_tlane.TILE * TLANE_WARPS) == 0
    ):
        try:
            _launch_tlane(u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus,
                          out, last_state, checkpoints)  # fmt: skip
            return
        except LaneLayoutError as e:  # checked before its first launch: nothing written
            _time_lanes_off(e)
    # state-contiguous buffers (Note [selective scan forward layout]): the checkpoints go straight
    # into ``checkpoints`` (fresh, contiguous fp32 (batch, dim, NCK, N): ``shapes``) unless N was
    # padded
    direct = NP == N
    ckt = checkpoints if direct else torch.empty((batch, dim, NCK, NP), dtype=f32, device=dev)
    init_t = None
    if initial_state is not None:
        init_t = torch.zeros((batch, dim, NP), dtype=f32, device=dev)
        init_t[:, :, :N].copy_(initial_state)
    # the lane kernel scales A itself where it can read it as it is (one small op fewer: the host
    # time of batch-1 calls), but not for fp32 inputs: there ptxas then schedules the loop
    # differently and it ran slower (H200, 2026-12-01: 0.73 vs 0.68 ms at (8, 4096, 2048, 16),
    # 0.34 vs 0.31 at (16, 1536, 1024, 16); bf16 the same either way, 0.66 ms)
    a_raw = lane and direct and u.dtype != f32 and A.dtype == f32 and A.is_contiguous()
    if lane:  # both copies in one launch
        Bt, Ct = prep_BC_lane(B, C, batch, NP, LP, rows16 or f32)
        if rows16 == torch.bfloat16:  # bf16 pairs as int32 words (the kernels' ``BC16`` = 1)
            Bt, Ct = Bt.view(torch.int32), Ct.view(torch.int32)
    else:
        Bt, Ct = prep_BC(B, batch, NP), prep_BC(C, batch, NP)
    args: dict[str, torch.Tensor | int | None] = dict(
        u=u.contiguous(),
        delta=delta.contiguous(),
        A2=A if a_raw else prep_A(A, NP),
        Bt=Bt,
        Ct=Ct,
        Dv=as_f32(D) if D is not None else None,
        z=z.contiguous() if z is not None else None,
        delta_bias=as_f32(delta_bias) if delta_bias is not None else None,
        init=init_t,
        out=out,
        ckpt=ckt,
    )
    consts = dict(
        SOFTPLUS=delta_softplus,
        NP=NP,
        CK=CHECKPOINT_LEN,
        BLOCK_D=block_d,
        HAS_D=D is not None,
        HAS_Z=z is not None,
        HAS_BIAS=delta_bias is not None,
        HAS_INIT=initial_state is not None,
        SPLIT=nseg > 1,
        num_warps=warps,
    )
    if lane:
        args["LP"] = LP
        roll = LANE_BC_ROLL and LANE_AHEAD == 1 and not LANE_OPTIONS.get("BC_JIT")
        consts.update(KL=KL, TPL=TPL, A_RAW=a_raw, HAS_LAST=direct, Y_SCATTER=LANE_Y_SCATTER,
                      AHEAD=LANE_AHEAD, BC_ROLL=roll, BCAST_TILE=bcast_tile(u.dtype),
                      SEG_T=seg_t)  # fmt: skip
        even_ok = roll and LANE_AHEAD == 1 and not LANE_OPTIONS and L % TT == 0
        if even_ok and (LANE_EVEN == 2 or (LANE_EVEN == 1 and nseg == 1)):
            if dim % block_d == 0:
                consts.update(EVEN=True, AHEAD=LANE_EVEN_AHEAD)
                if LANE_EVEN_LDM:
                    consts["LDM"] = LANE_EVEN_LDM
                if LANE_I32 and batch * dim * L < 2**31:
                    consts["I32"] = True
        if rows16 is not None:
            consts["BC16"] = 1 if rows16 == torch.bfloat16 else 2
        consts.update(LANE_OPTIONS)
        kernel = launcher(_selective_scan_fwd_lane_kernel, check_lane_layout(KL, True))
    else:
        consts["TT"] = TT
        kernel = launcher(_selective_scan_fwd_kernel)
    last: dict[str, torch.Tensor | None] = {"last": None} if lane else {}
    # what the real pass reads of the local pass: the lane kernel carries the segment states
    # itself (one launch fewer), the 2-D one reads the carry pass's checkpoints
    carried: dict[str, torch.Tensor | None] = {"seg_state": None, "seg_dt": None}
    # local segments per real one (LANE_LOCAL_FINE): segments of whole tiles that divide
    fold = LANE_LOCAL_FINE if seg_t and LANE_LOCAL_FINE > 1 and seg % LANE_LOCAL_FINE == 0 else 1
    # ... or local segments of their own length (LANE_LOCAL_TILES), shorter than a real segment
    # (the kernel's one snapshot a local segment): lt tiles, nloc of them
    lt = LANE_LOCAL_TILES if seg_t and nseg > 1 and LANE_LOCAL_TILES < seg else 0
    nloc = cdiv((nseg - 1) * seg, lt) if lt else (nseg - 1) * fold
    if lt:
        fold = 1
        consts["SNAP"] = True
    if fold > 1:
        consts["FOLD"] = fold
    if nseg > 1:
        # Note [selective scan segments]: local pass, carry pass, then the real pass below
        nrec = nloc + nseg if lt else nseg * fold
        seg_state = torch.empty((batch, nrec, dim, NP), dtype=f32, device=dev)
        seg_dt = torch.empty((batch, nrec, dim), dtype=f32, device=dev)
        # the lane kernel's local pass skips the last segment (nothing reads its end state)
        kernel[(nblk, batch, nloc if lane else nseg)](
            **args,
            seg_state=seg_state,
            seg_dt=seg_dt,
            **last,
            dim=dim,
            L=L,
            N=N,
            G=G,
            NCK=NCK,
            SEG=lt or seg // fold,
            **({"SEG2": seg} if lane else {}),
            LOCAL=True,
            **({**consts, **LANE_LOCAL_OPTIONS} if lane else consts),
            **({"maxnreg": LANE_LOCAL_MAXNREG} if lane and LANE_LOCAL_MAXNREG else {}),
            **({"UNROLL": FWD_UNROLL[1]} if lane else {}),
        )
        if lane:
            carried = {"seg_state": seg_state, "seg_dt": seg_dt}
        else:
            launcher(_selective_scan_fwd_carry_kernel)[(nblk, batch)](
                args["A2"],
                init_t,
                seg_state,
                seg_dt,
                ckt,
                dim,
                NCK,
                nseg,
                seg,
                NP=NP,
                BLOCK_D=block_d,
                HAS_INIT=initial_state is not None,
                num_warps=warps,
            )
    if lane:
        last["last"] = last_state if direct else None
    if ch2:  # Note [selective scan forward two channels a thread]
        real, grid, extra = _ch2_real(consts, dim, block_d, batch, nseg, KL)
    else:
        real = kernel
        grid = (nblk, batch, nseg)
        extra = {"LOCAL": False, **consts}
        extra.update(split_cap(batch * nblk * nseg, warps, u.device) if lane and nseg > 1 else {})
        extra.update({"UNROLL": FWD_UNROLL[0]} if lane else {})
    extra.update({"SEG2": lt} if lane else {})
    if lane and extra.get("EVEN"):
        if LANE_REAL_I32 >= 0:
            extra["I32"] = bool(LANE_REAL_I32) and batch * dim * L < 2**31
        if LANE_REAL_AHEAD > 0:
            extra["AHEAD"] = LANE_REAL_AHEAD
        if LANE_REAL_LDM >= 0:
            extra["LDM"] = LANE_REAL_LDM
    real[grid](**args, **carried, **last, dim=dim, L=L, N=N, G=G, NCK=NCK, SEG=seg, **extra)
    if not direct:
        checkpoints.copy_(ckt[..., :N])
    if not (lane and direct):  # the lane kernel wrote it
        last_state.copy_(checkpoints[:, :, -1])
