"""Forward kernel of ``ssmscan::selective_scan_fwd`` with time lanes, for small batch x dim
(CUDA, N = 16; ``triton_fwd.FWD_TIME_LANES``, off by default until timed on a GPU).

Note [selective scan forward time lanes]
----------------------------------------
Where batch x dim alone gives too few warps, the lane forward splits L into segments and runs
twice (Note [selective scan segments]: a local pass from zero, then the real pass from the
carried states), so every exponential is computed twice. Here one warp owns one channel and
walks L in tiles of TL x TPT = 8 x 8 = 64 steps, the tile's steps spread over the lanes as well
as its states: lane 4 i + k holds states 4 k .. 4 k + 3 of time lane i, which owns steps
8 i .. 8 i + 7 of the tile. Per tile (h, replicated over the time lanes, is the state before it):

1. each time lane turns its 8 steps into decays and inputs, a_j = exp2(dt_j A2), b_j = dt_j u_j
   B_j (kept in registers), and folds them into its sub-chunk's map h -> P h + Q;
2. an inclusive scan of the maps over the 8 time lanes (3 ``shfl.sync.up`` steps of (P, Q)
   composition: lanes 4 d apart, d = 1, 2, 4) gives each time lane the map from the tile's start
   to its end; E_i = P_i h + Q_i, the state after time lane i;
3. time lane i starts from E_{i-1} (``shfl.sync.up`` by 4 lanes; lane 0 from h) and runs its 8
   steps again from the kept a_j, b_j, no exponentials: h_j = a_j h_{j-1} + b_j, y_j = C_j . h_j
   (in-thread over the lane's 4 states, then a reduce-scatter over the 4 state lanes, 6
   ``shfl.sync.bfly``: lane k ends with steps 2 k, 2 k + 1 of its time lane);
4. the next tile starts from E_7 (``shfl.sync.idx`` from lanes 28 .. 31).

One exponential per (state, step), as in the one-segment lane forward, and one pass: the segment
split's local pass (half the split forward's exponentials) is gone, for the price of the scan's
24 shuffles and 24 products per lane and tile. dt, dt * u, gate and skip are computed once per
element (lane k's steps 2 k, 2 k + 1) and broadcast per step with ``_lane_bcast``, as in the lane
forward; B_t / C_t come from the same time-padded copies (here a multiple of 64 steps plus one
tile), their next tile prefetched into L1.

Every shuffle assumes Triton's layout for these shapes: dimension 0 (time lane) on lane bits
2-4, dimension 1 (state lane) on bits 0-1. ``tlane_layout_problem`` checks every shuffle operand
in the compiled TTGIR; the launcher runs it on each kernel it compiles before its first launch
and falls back to the segment split if it fails. Under the interpreter (no inline PTX) the
shuffles are gathers. Status: correct against float64 under the interpreter
(``tests/ops/selective_scan/test_triton_fwd_tlane.py``) and on an H200 (the GPU test); off by
default because it is slower there than the segment split it would replace (2026-12-01, CUDA
graphs, ms, split -> time lanes): (1, 1536, 4096, 16) bf16 0.117 -> 0.160, fp32 0.127 -> 0.173;
(1, 1024, 65536, 16) bf16 1.077 -> 1.270, fp32 1.093 -> 1.345. It does fewer instructions
(0.44 vs 0.64 warp instructions and 1.1 vs 2.25 exponentials per (state, step) in the sm_90
SASS) but has a warp per channel (1024-1536 warps) against the split's 3072-8192 and a serial
chain per tile (8 steps, 3 scan steps, 8 steps): latency, not issue, bounds it there. Combining
it with the segment split (more warps) was tried in 2026-12-04 as a program a (channel, tile)
chained by a look-back (Note [selective scan forward time-lane chain], ``triton_fwd_tchain``):
1.7x the split's time, 1.06x even without its chain.

Nsight Compute (2026-12-02, (1, 1536, 4096) bf16, ``--clock-control none``): 43.9M instructions
against the split's 62.2M (local 23.8M + real 38.4M), but 11.6 warps per multiprocessor
(occupancy 18%), 0.55 eligible warps per scheduler, issue slots 31-36% busy, where the split's
passes run 50-55% busy at 1.0-1.2 eligible. Loading a tile's 16 B / C rows at its top
(``BC_MODE`` 1) took the kernel from 136 to 125 us there, but was slower at (1, 1024, 65536);
more warps per channel is what the figures point at.

Two warps a channel (``W`` = 2, ``triton_fwd.TLANE_WARPS``): a tile of 128 steps, warp w its
time lanes 8 w .. 8 w + 7 (rows r = 8 w + i, the warp on the row's bit 3), every lane's work as
at W = 1. The in-warp scan gives each warp the map over its half of the tile; each warp's last
time lane stores it to a per-channel scratch (two slots, by tile parity), one barrier, every
thread loads both (``_warp_maps``) and composes: warp 1 starts from P0 h + Q0, the next tile
from P1 (P0 h + Q0) + Q1, the exchange off h's chain. sm_90: 680 instructions per warp and
tile against 624, one BAR, 148-168 registers. H200, 2026-12-02, CUDA graphs, ms, split / W 1 /
W 2 (BC_MODE 1): (1, 1536, 4096) bf16 0.116 / 0.130 / 0.121, fp32 0.129 / 0.131 / 0.124;
(1, 1024, 65536) bf16 1.045 / 1.369 / 1.226, fp32 1.099 / 1.421 / 1.237. Faster than one warp,
and at 4096 steps in fp32 than the split, but not in bf16: at 148-168 registers two-warp
programs fit 12-13 warps a multiprocessor (Nsight Compute: occupancy 19%, 1.3-1.9 waves), so
the doubled warps barely raise the warps resident. An earlier form split the states over the
warps instead (y summed through shared memory): every warp then repeats the per-step scalar
work and the sum costs five barriers a tile, 69M instructions against 44M and 2.3-2.9x the
time; it is gone.

16-bit rows (``BC16``, ``triton_fwd.TLANE_BC16``; Note [selective scan forward 16-bit rows]):
where B and C come in u's bf16 / fp16 the copies keep that dtype and a row is converted where it
is used (``_row_f32``), half the row bytes and registers for 2 more instructions a 4-state row.
Why (Nsight Compute, 2026-12-04, (1, 1536, 4096) bf16, W = 1, BC_MODE 1): 7.6 cycles an issued
instruction, 46% of them long-scoreboard waits, a third of all stall samples on two FMULs of
step 3 waiting for C rows loaded at the top of the same iteration, the L1 hit rate 70%: 11.5
one-channel warps a multiprocessor, each at its own place in L, hold 8 KB of rows a tile each
and miss L1. With 16-bit rows held a tile ahead (BC_MODE 2, 128 registers): 107 us, 48% issue,
5.4 cycles an instruction; the waits left are the rolled rows' copies at the loop's end (MOVs
waiting for the loads, 10% of the samples) and the scan's and the reduce-scatter's shuffles
(short scoreboard, 23%). H200, CUDA graphs, forward ms at (1, 1536, 4096) bf16 / fp32
(``device_twentyfifth1.sh`` .. ``3``; the split 0.098 / 0.106): BC_MODE 0 / 1 / 2 with fp32 rows
0.150 / 0.126 / 0.129, fp32 0.146 / 0.131 / 0.142; with 16-bit rows (bf16) 0.163 / 0.172 /
**0.114**. Also measured and not kept (``benchmarks/selective_scan/experiments/
twentyfifth_tlane_stages_unroll.patch``): the loop pipelined by Triton (each tile's rows and
u / delta / z as cp.async copies to shared memory, 17 KB a one-warp program) 0.145 (3 stages),
0.156 (4), with 16-bit rows 0.129; the loop unrolled by 2 / 4 tiles (u / delta / z then only
half a tile ahead) 0.126-0.151. The time-lane forward stays 16% behind the split at the missed
row; what it would still need is fewer latency-bound rounds a tile (the 3-round map scan and the
reduce-scatter) or more independent work a warp.

Two channels a warp (``_selective_scan_fwd_tlane2_kernel``, ``triton_fwd.TLANE_CH2``): every
thread runs the same time lane and states of channels 2 p and 2 p + 1 (``_tlane_tile`` twice
on the same rows), so each row loaded and converted serves both and the two channels' scans
interleave; 768 warps at batch 1 (1.45 a scheduler), 168 registers. sm_90: 7.4 warp
instructions a channel-step against 8.5 (bf16, 16-bit rows a tile ahead), 7.1 against 8.0 (rows
at the top). H200, 2026-12-04, CUDA graphs, (1, 1536, 4096), forward ms (the split 0.0985 bf16 /
0.1063 fp32): 16-bit rows a tile ahead 0.1305 (one channel 0.114), at the top 0.137; fp32 rows
a tile ahead 0.135 bf16 and **0.110 fp32** (one channel 0.142: the time-lane forward's closest
to the split, 4% behind), at the top 0.154 / 0.164. In bf16 15% of its stall samples sit on one
PRMT at the loop's end that unpacks the next tile's u / delta / z halves into the carried
registers and waits for their loads (fp32 has no such unpack). Carrying them as the loaded
int32 words of two bf16 instead (``benchmarks/selective_scan/experiments/
twentyfifth_tlane_u32.patch``) took the PRMTs out of the loop's end but gained 1.5% (0.1273):
the wait moved to their next consumer; at 1.45 warps a scheduler the latency has nowhere to go.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv
from ssmscan.ops.selective_scan.triton_common import (
    _PTX,
    _prefetch_l1,
    _sigmoid,
    _softplus,
)
from ssmscan.ops.selective_scan.triton_fwd_lane import (
    _ALIAS,
    LaneLayoutError,
    _bases,
    _lane_bcast,
    _slot,
    _y_scatter,
)

TL = 8  # time lanes per channel (lane bits 2-4)
TPT = 8  # steps per time lane and tile
TILE = TL * TPT  # steps per tile


@triton.jit
def _rows_up(x, D: tl.constexpr, o_r):
    """Row r - D's x for the rows of time lane i >= D (lane - 4 D: the time lanes are lane bits
    2-4 of each warp, rows r = w * TL + i); rows of time lanes below D get their own on the
    GPU, another row's interpreted (a gather; ``o_r`` the row index): callers mask them either
    way."""
    if _PTX:
        xi = x.to(tl.int32, bitcast=True)
        if D == 1:
            r = tl.inline_asm_elementwise(
                "shfl.sync.up.b32 $0, $1, 4, 0, -1;", "=r,r", [xi], tl.int32, True, 1
            )
        elif D == 2:
            r = tl.inline_asm_elementwise(
                "shfl.sync.up.b32 $0, $1, 8, 0, -1;", "=r,r", [xi], tl.int32, True, 1
            )
        else:
            r = tl.inline_asm_elementwise(
                "shfl.sync.up.b32 $0, $1, 16, 0, -1;", "=r,r", [xi], tl.int32, True, 1
            )
        return r.to(tl.float32, bitcast=True)
    else:
        idx = tl.broadcast_to(tl.maximum(o_r - D, 0), x.shape)
        return tl.gather(x, idx, axis=0)


@triton.jit
def _rows_last(x, o_k, o_r, TL: tl.constexpr):
    """Every row gets the last time lane's x of its warp (row w * TL + TL - 1; lane 28 + k's:
    ``shfl.sync.idx``). Interpreted: a gather (``o_r`` the row index)."""
    if _PTX:
        xi = x.to(tl.int32, bitcast=True)
        src = tl.broadcast_to(28 + o_k, x.shape)
        r = tl.inline_asm_elementwise(
            "shfl.sync.idx.b32 $0, $1, $2, 0x1f, -1;", "=r,r,r", [xi, src], tl.int32, True, 1
        )
        return r.to(tl.float32, bitcast=True)
    else:
        idx = tl.broadcast_to((o_r // TL) * TL + TL - 1, x.shape)
        return tl.gather(x, idx, axis=0)


@triton.jit
def _warp_maps(P, Q, xchg, t0, o_r, o_in, TL: tl.constexpr, TILE: tl.constexpr):
    """Both warps' maps h -> P h + Q over their halves of the tile, (P0, Q0, P1, Q1), in every
    row (W = 2; P / Q (R, KL, SPT) after the scan, each warp's last time lane holding its whole
    map): that lane stores them into ``xchg`` (the program's (2, W, 2, NP) fp32, a slot per
    tile parity), a barrier, every thread loads both. Two slots: a warp cannot be a whole tile
    ahead, so nothing is overwritten before the other warp read it."""
    NP: tl.constexpr = o_in.shape[1]
    S3: tl.constexpr = P.shape
    R: tl.constexpr = o_r.shape[0]
    p_x = xchg + ((t0 // TILE) % 2) * (4 * NP)
    last = ((o_r % TL) == TL - 1)[:, None]  # (R, 1): each warp's last time lane
    p_w = p_x + (o_r // TL)[:, None] * (2 * NP) + o_in  # (R, NP): its warp's map
    tl.store(p_w, tl.reshape(P, (R, NP)), mask=last)
    tl.store(p_w + NP, tl.reshape(Q, (R, NP)), mask=last)
    tl.debug_barrier()
    P0 = tl.reshape(tl.load(p_x + o_in), S3)
    Q0 = tl.reshape(tl.load(p_x + NP + o_in), S3)
    P1 = tl.reshape(tl.load(p_x + 2 * NP + o_in), S3)
    Q1 = tl.reshape(tl.load(p_x + 3 * NP + o_in), S3)
    return P0, Q0, P1, Q1


@triton.jit
def _tlane_loads(u, delta, z, row, t0, L, o_t, TL: tl.constexpr, KL: tl.constexpr,
                 TPL: tl.constexpr, HAS_Z: tl.constexpr):  # fmt: skip
    """u, delta, z (u when there is none) of the tile from t0, as loaded: (TL, TPT) blocks
    reshaped to (TL, KL, TPL), element [i, k, s] step 8 i + 2 k + s (Note [selective scan
    forward time lanes]; the 2-D load gets Triton's lane order, as in the lane forward)."""
    T3: tl.constexpr = (TL, KL, TPL)
    m = (t0 + o_t) < L
    p = row + t0 + o_t
    b_u = tl.reshape(tl.load(u + p, mask=m, other=0.0), T3)
    b_x = tl.reshape(tl.load(delta + p, mask=m, other=0.0), T3)
    if HAS_Z:
        b_z = tl.reshape(tl.load(z + p, mask=m, other=0.0), T3)
    else:
        b_z = b_u
    return b_u, b_x, b_z


@triton.jit
def _tlane_row(p, t, NP: tl.constexpr, S3: tl.constexpr):
    """Step t's B or C row of each time lane (p: ``p_B`` / ``p_C``) as a (TL, KL, SPT) block, as
    stored: fp32, or with ``BC16`` (16-bit rows, NP the row's width in its words) a (TL, KL,
    SPT / 2) block of bf16 pairs or (TL, KL, SPT) of fp16, for ``_row_f32``."""
    return tl.reshape(tl.load(p + t * NP), S3)


@triton.jit
def _row_f32(x, SPT: tl.constexpr):
    """A row from ``_tlane_row`` as (TL, KL, SPT) fp32: bf16 pairs in int32 words by two bit
    operations (Note [selective scan forward 16-bit rows]), fp16 converted, fp32 as it is."""
    if x.dtype == tl.int32:
        lo = (x << 16).to(tl.float32, bitcast=True)
        hi = (x & -65536).to(tl.float32, bitcast=True)
        return tl.reshape(tl.join(lo, hi), (x.shape[0], x.shape[1], SPT))
    else:
        return x.to(tl.float32)


@triton.jit
def _tlane_bc_rows(p_B, p_C, t0, NP: tl.constexpr, S3: tl.constexpr, TPT: tl.constexpr):
    """The B and C rows of each time lane's TPT steps of the tile from t0, as two tuples of
    (TL, KL, SPT) blocks (``BC_MODE`` 1 and 2; in bounds: the copies hold one tile more)."""
    rB = ()
    rC = ()
    for j in tl.static_range(TPT):
        rB = rB + (_tlane_row(p_B, t0 + j, NP, S3),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        rC = rC + (_tlane_row(p_C, t0 + j, NP, S3),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    return rB, rC


@triton.jit
def _prefetch_tile_l1(Bt, Ct, row0, o_lane, BC16: tl.constexpr):
    """``prefetch.global.L1`` of a tile's B and C rows (W x 64 steps x 16 states fp32 = W x 32
    lines of 128 bytes each; 16-bit rows half of that) from element ``row0``: one line of each per
    lane (``o_lane`` 0 .. 32 W - 1; with 16-bit rows lanes 16 apart take the same line). A hint
    (no layout assumption: a different layout only prefetches a line twice); nothing
    interpreted."""
    if _PTX:
        for X in tl.static_range(2):
            if BC16 == 0:
                p = (Bt if X == 0 else Ct) + row0 + o_lane * 32
            else:  # 128 bytes: 32 int32 words (bf16 pairs) or 64 fp16
                lane = (o_lane // 32) * 16 + o_lane % 16
                p = (Bt if X == 0 else Ct) + row0 + lane * (32 if BC16 == 1 else 64)
            _prefetch_l1(p)


@triton.jit
def _tlane_scan(P, Q, o_r3, o_i3):
    """Step 2: the inclusive scan of the time lanes' maps h -> P h + Q over each warp's 8 time
    lanes (earlier lane first; 3 rounds of ``_rows_up``)."""
    for e in tl.static_range(3):
        Pp = _rows_up(P, 1 << e, o_r3)
        Qp = _rows_up(Q, 1 << e, o_r3)
        has = o_i3 >= (1 << e)
        Q = tl.where(has, P * Qp + Q, Q)
        P = tl.where(has, P * Pp, P)
    return P, Q


@triton.jit
def _tlane_skip_gate(b_y, b_u, b_z, b_D, HAS_D: tl.constexpr, HAS_Z: tl.constexpr):
    """A tile's y with the skip D u added and the gate z sigmoid(z) applied (fp32 u)."""
    if HAS_D:
        b_y += b_D * b_u
    if HAS_Z:
        b_zf = b_z.to(tl.float32)
        b_y *= b_zf * _sigmoid(b_zf)
    return b_y


@triton.jit
def _selective_scan_fwd_tlane_kernel(
    u,  # (batch, dim, L) input
    delta,  # (batch, dim, L) time step before bias / softplus
    A2,  # (dim, NP) fp32, A * log2(e); A itself if A_RAW
    Bt,  # (batch, G, LP, NP) fp32, B time-major, zero-padded steps (whole tiles plus one)
    Ct,  # (batch, G, LP, NP) fp32, C time-major, the same
    Dv,  # (dim,) fp32 skip weight, or None
    z,  # (batch, dim, L) gate, or None
    delta_bias,  # (dim,) fp32, or None
    init,  # (batch, dim, NP) fp32 initial state, or None
    out,  # (batch, dim, L) output, u's dtype
    ckpt,  # (batch, dim, NCK, NP) fp32: state before each chunk, last entry the final state
    last,  # (batch, dim, NP) fp32 out: the final state
    xchg,  # W = 2: (batch, dim, 2, W, 2, NP) fp32 scratch, the warps' maps (``_warp_maps``)
    dim,  # channels
    L,  # sequence length
    LP,  # steps of Bt / Ct
    G,  # groups of B / C
    NCK,  # checkpoint entries = cdiv(L, CK) + 1
    SOFTPLUS: tl.constexpr,  # dt = softplus(delta + bias)
    NP: tl.constexpr,  # states: 16
    CK: tl.constexpr,  # checkpoint chunk length, a multiple of 64
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    A_RAW: tl.constexpr,  # A2 is A: scaled by log2(e) here
    # the next tile's B / C rows into L1; eager launches only (a non-pure inline asm: Note
    # [traced kernels' inline asm] in ``triton_bwd_lane``)
    PREFETCH_L1: tl.constexpr,
    # where the tile's B / C rows are loaded (``BC_MODE``): 0 each where it is used, 1 all 16 at
    # the top of the iteration, 2 the next tile's at the top (held in registers a tile ahead)
    BC_MODE: tl.constexpr = 0,
    # warps per channel (``triton_fwd.TLANE_WARPS``, 1 or 2): a tile of W x 64 steps, warp w
    # its time lanes w * 8 .. w * 8 + 7; the warps' maps composed through shared memory
    W: tl.constexpr = 1,
    # B / C rows in 16 bits (``triton_fwd.TLANE_BC16``): 1 bf16 pairs as int32 words, 2 fp16
    BC16: tl.constexpr = 0,
):
    tl.static_assert(NP == 16)
    tl.static_assert(W == 1 or W == 2)
    TL: tl.constexpr = 8  # time lanes a warp
    KL: tl.constexpr = 4
    R: tl.constexpr = W * TL  # rows: time lane r = w * TL + i, lane i of warp w
    SPT: tl.constexpr = NP // KL
    TPL: tl.constexpr = 2  # steps per state lane in the (R, KL, TPL) tiles
    TPT: tl.constexpr = KL * TPL
    TILE: tl.constexpr = R * TPT
    S3: tl.constexpr = (R, KL, SPT)
    RW: tl.constexpr = NP // 2 if BC16 == 1 else NP  # a row's elements in Bt / Ct
    S3W: tl.constexpr = (R, KL, SPT // 2) if BC16 == 1 else S3
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_r = tl.arange(0, R)
    o_n = tl.arange(0, NP)
    o_k = tl.arange(0, KL)
    o_r3 = o_r[:, None, None]
    o_i3 = o_r3 % TL  # the time lane within its warp
    o_k2 = o_k[None, :]
    o_k3 = o_k[None, :, None]
    o_in = o_r[:, None] * 0 + o_n[None, :]  # (R, NP): state n in every row
    o_t = o_r[:, None] * TPT + tl.arange(0, TPT)[None, :]  # (R, TPT): step within the tile
    o_j = tl.reshape(o_t, (R, KL, TPL))
    o_lane = o_r[:, None] * KL + o_k[None, :]  # (R, KL)
    row0 = (o_r == 0)[:, None] & (o_n < NP)[None, :]  # (R, NP): stores from one row

    b_A2 = tl.reshape(tl.load(A2 + i_d * NP + o_in), S3)
    if A_RAW:
        b_A2 = b_A2 * 1.4426950408889634
    b_D = tl.load(Dv + i_d) if HAS_D else 0.0
    b_bias = tl.load(delta_bias + i_d) if HAS_BIAS else 0.0
    ch = i_b * dim + i_d  # int64 channel index
    row = ch * L
    grp = i_d // (dim // G)
    bc = (i_b * G + grp) * LP * RW
    o_iw = o_r[:, None] * 0 + tl.arange(0, RW)[None, :]  # (R, RW): word w of the row
    p_B = Bt + bc + (o_r[:, None] * TPT) * RW + o_iw  # (R, RW): + (t0 + j) * RW
    p_C = Ct + bc + (o_r[:, None] * TPT) * RW + o_iw
    p_ck = ckpt + ch * (NCK * NP) + o_in
    if HAS_INIT:
        h = tl.reshape(tl.load(init + ch * NP + o_in), S3)
    else:
        h = tl.zeros(S3, dtype=tl.float32)
    nxt = _tlane_loads(u, delta, z, row, 0, L, o_t, R, KL, TPL, HAS_Z)
    if BC_MODE == 2:
        nbc = _tlane_bc_rows(p_B, p_C, 0, RW, S3W, TPT)
    for t0 in range(0, L, TILE):
        t0 = tl.multiple_of(t0, TILE)
        if t0 % CK == 0:
            tl.store(p_ck + (t0 // CK) * NP, tl.reshape(h, (R, NP)), mask=row0)
        b_u, b_x, b_z = nxt
        nxt = _tlane_loads(u, delta, z, row, t0 + TILE, L, o_t, R, KL, TPL, HAS_Z)
        if BC_MODE == 1:
            rBs, rCs = _tlane_bc_rows(p_B, p_C, t0, RW, S3W, TPT)
        elif BC_MODE == 2:
            rBs, rCs = nbc
            nbc = _tlane_bc_rows(p_B, p_C, t0 + TILE, RW, S3W, TPT)
        if PREFETCH_L1:
            _prefetch_tile_l1(Bt, Ct, bc + (t0 + TILE) * RW, o_lane, BC16)
        # 1. dt, dt * u once per element; decays and inputs per step; each time lane's map
        b_u = b_u.to(tl.float32)
        b_dt = b_x.to(tl.float32) + b_bias
        if SOFTPLUS:
            b_dt = _softplus(b_dt)
        b_dt = tl.where(t0 + o_j < L, b_dt, 0.0)  # padded steps: decay 1, input 0
        b_du = b_dt * b_u
        As = ()
        Bs = ()
        P = h
        Q = h
        for j in tl.static_range(TPT):
            b_dtj = _lane_bcast(_slot(b_dt, j % TPL, TPL), o_k, j // TPL, KL)[:, :, None]
            b_duj = _lane_bcast(_slot(b_du, j % TPL, TPL), o_k, j // TPL, KL)[:, :, None]
            if BC_MODE == 0:
                b_B = _row_f32(_tlane_row(p_B, t0 + j, RW, S3W), SPT)
            else:
                b_B = _row_f32(rBs[j], SPT)
            a = tl.exp2(b_dtj * b_A2)
            b = b_duj * b_B
            As = As + (a,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            Bs = Bs + (b,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            if j == 0:
                P = a
                Q = b
            else:
                Q = a * Q + b
                P = a * P
        # 2. inclusive scan of the maps over each warp's time lanes
        P, Q = _tlane_scan(P, Q, o_r3, o_i3)
        if W == 1:
            g0 = h
            E = P * h + Q
            h = _rows_last(E, o_k3, o_r3, TL)  # 4. the next tile's start
        else:
            # the warps' whole maps (their last time lane's), both in every row; warp 1 starts
            # from warp 0's end, the next tile from warp 1's (independent of h: off its chain)
            P0, Q0, P1, Q1 = _warp_maps(P, Q, xchg + ch * (8 * NP), t0, o_r, o_in, TL, TILE)
            h1 = P0 * h + Q0
            g0 = tl.where(o_r3 < TL, h, h1)
            E = P * g0 + Q
            h = P1 * h1 + Q1  # 4. the next tile's start
        # 3. each time lane from the state before it, again through its steps
        g = tl.where(o_i3 == 0, g0, _rows_up(E, 1, o_r3))
        ys = ()
        for j in tl.static_range(TPT):
            if BC_MODE == 0:
                b_C = _row_f32(_tlane_row(p_C, t0 + j, RW, S3W), SPT)
            else:
                b_C = _row_f32(rCs[j], SPT)
            g = As[j] * g + Bs[j]
            ys = ys + (tl.sum(g * b_C, axis=2),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        b_y = _y_scatter(ys, o_k2)  # (R, KL, TPL): step 8 r + 2 k + s
        b_y = _tlane_skip_gate(b_y, b_u, b_z, b_D, HAS_D, HAS_Z)
        m = (t0 + o_t) < L
        tl.store(out + row + t0 + o_t, tl.reshape(b_y, (R, TPT)).to(out.dtype.element_ty), mask=m)
    NC = NCK - 1
    tl.store(p_ck + NC * NP, tl.reshape(h, (R, NP)), mask=row0)  # the final entry
    tl.store(last + ch * NP + o_in, tl.reshape(h, (R, NP)), mask=row0)


@triton.jit
def _tlane_maps(b_u, b_x, b_A2, b_bias, rBs, t0, L, o_j, o_k, o_r3, SOFTPLUS: tl.constexpr,
                TL: tl.constexpr, KL: tl.constexpr, TPL: tl.constexpr, SPT: tl.constexpr):  # fmt: skip
    """Steps 1-2 of Note [selective scan forward time lanes] for one channel's tile (one warp):
    (u in fp32, the steps' decays As and inputs Bs (tuples of (TL, KL, SPT)), the time lanes'
    maps h -> P h + Q scanned over the time lanes) from the tile's u / delta as loaded and its B
    rows (``rBs``, as loaded)."""
    TPT: tl.constexpr = KL * TPL
    b_u = b_u.to(tl.float32)
    b_dt = b_x.to(tl.float32) + b_bias
    if SOFTPLUS:
        b_dt = _softplus(b_dt)
    b_dt = tl.where(t0 + o_j < L, b_dt, 0.0)  # padded steps: decay 1, input 0
    b_du = b_dt * b_u
    As = ()
    Bs = ()
    P = b_A2
    Q = b_A2
    for j in tl.static_range(TPT):
        b_dtj = _lane_bcast(_slot(b_dt, j % TPL, TPL), o_k, j // TPL, KL)[:, :, None]
        b_duj = _lane_bcast(_slot(b_du, j % TPL, TPL), o_k, j // TPL, KL)[:, :, None]
        a = tl.exp2(b_dtj * b_A2)
        b = b_duj * _row_f32(rBs[j], SPT)
        As = As + (a,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        Bs = Bs + (b,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        if j == 0:
            P = a
            Q = b
        else:
            Q = a * Q + b
            P = a * P
    P, Q = _tlane_scan(P, Q, o_r3, o_r3 % TL)
    return b_u, As, Bs, P, Q


@triton.jit
def _tlane_steps(g, As, Bs, rCs, b_u, b_z, b_D, o_k2, SPT: tl.constexpr, HAS_D: tl.constexpr,
                 HAS_Z: tl.constexpr):  # fmt: skip
    """Step 3 of Note [selective scan forward time lanes]: each time lane through its steps from
    g, the state before it, with the kept decays / inputs and the C rows (as loaded); the
    tile's y (TL, KL, TPL) with the skip and gate, before its store."""
    ys = ()
    for j in tl.static_range(len(As)):
        g = As[j] * g + Bs[j]
        ys = ys + (tl.sum(g * _row_f32(rCs[j], SPT), axis=2),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    b_y = _y_scatter(ys, o_k2)  # (TL, KL, TPL): step 8 r + 2 k + s
    return _tlane_skip_gate(b_y, b_u, b_z, b_D, HAS_D, HAS_Z)


@triton.jit
def _tlane_tile(h, b_u, b_x, b_z, b_A2, b_D, b_bias, rBs, rCs, t0, L, o_j, o_k, o_k2, o_k3, o_r3,
                SOFTPLUS: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr,
                TL: tl.constexpr, KL: tl.constexpr, TPL: tl.constexpr, SPT: tl.constexpr):  # fmt: skip
    """One channel's tile from state h (one warp, ``W`` = 1): steps 1-4 of Note [selective scan
    forward time lanes] with the tile's B / C rows given (``rBs`` / ``rCs``, as loaded);
    returns (the state after the tile, the tile's y (TL, KL, TPL) before its store). The
    two-channel kernel calls it once per channel with the same rows."""
    b_u, As, Bs, P, Q = _tlane_maps(b_u, b_x, b_A2, b_bias, rBs, t0, L, o_j, o_k, o_r3, SOFTPLUS,
                                    TL, KL, TPL, SPT)  # fmt: skip
    E = P * h + Q
    g = tl.where(o_r3 % TL == 0, h, _rows_up(E, 1, o_r3))
    h = _rows_last(E, o_k3, o_r3, TL)
    return h, _tlane_steps(g, As, Bs, rCs, b_u, b_z, b_D, o_k2, SPT, HAS_D, HAS_Z)


@triton.jit
def _selective_scan_fwd_tlane2_kernel(
    u, delta, A2, Bt, Ct, Dv, z, delta_bias, init, out, ckpt, last,  # as the one-channel kernel's
    dim, L, LP, G, NCK,
    SOFTPLUS: tl.constexpr, NP: tl.constexpr, CK: tl.constexpr, HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_INIT: tl.constexpr, A_RAW: tl.constexpr,
    PREFETCH_L1: tl.constexpr,
    BC_MODE: tl.constexpr = 2,  # 1 or 2, as the one-channel kernel's
    BC16: tl.constexpr = 0,
):  # fmt: skip
    """The time-lane forward with two channels a warp (``triton_fwd.TLANE_CH2``): program p
    runs channels 2 p and 2 p + 1 (of one B / C group) in the same warp, each thread both
    channels' time lane and states, so that every B / C row loaded serves both (half the row
    loads and conversions a channel) and the two channels' scans and shuffles interleave."""
    tl.static_assert(NP == 16)
    tl.static_assert(BC_MODE == 1 or BC_MODE == 2)
    TL: tl.constexpr = 8
    KL: tl.constexpr = 4
    R: tl.constexpr = TL
    SPT: tl.constexpr = NP // KL
    TPL: tl.constexpr = 2
    TPT: tl.constexpr = KL * TPL
    TILE: tl.constexpr = R * TPT
    S3: tl.constexpr = (R, KL, SPT)
    RW: tl.constexpr = NP // 2 if BC16 == 1 else NP
    S3W: tl.constexpr = (R, KL, SPT // 2) if BC16 == 1 else S3
    i_d = tl.program_id(0) * 2
    i_b = tl.program_id(1).to(tl.int64)
    o_r = tl.arange(0, R)
    o_n = tl.arange(0, NP)
    o_k = tl.arange(0, KL)
    o_r3 = o_r[:, None, None]
    o_k2 = o_k[None, :]
    o_k3 = o_k[None, :, None]
    o_in = o_r[:, None] * 0 + o_n[None, :]
    o_t = o_r[:, None] * TPT + tl.arange(0, TPT)[None, :]
    o_j = tl.reshape(o_t, (R, KL, TPL))
    o_lane = o_r[:, None] * KL + o_k[None, :]
    row0 = (o_r == 0)[:, None] & (o_n < NP)[None, :]

    b_A2a = tl.reshape(tl.load(A2 + i_d * NP + o_in), S3)
    b_A2b = tl.reshape(tl.load(A2 + (i_d + 1) * NP + o_in), S3)
    if A_RAW:
        b_A2a = b_A2a * 1.4426950408889634
        b_A2b = b_A2b * 1.4426950408889634
    b_Da = tl.load(Dv + i_d) if HAS_D else 0.0
    b_Db = tl.load(Dv + i_d + 1) if HAS_D else 0.0
    b_ba = tl.load(delta_bias + i_d) if HAS_BIAS else 0.0
    b_bb = tl.load(delta_bias + i_d + 1) if HAS_BIAS else 0.0
    ch = i_b * dim + i_d  # int64: the first channel; the second is ch + 1
    row = ch * L
    grp = i_d // (dim // G)  # both channels' group ((dim / G) even: the launcher's condition)
    bc = (i_b * G + grp) * LP * RW
    o_iw = o_r[:, None] * 0 + tl.arange(0, RW)[None, :]
    p_B = Bt + bc + (o_r[:, None] * TPT) * RW + o_iw
    p_C = Ct + bc + (o_r[:, None] * TPT) * RW + o_iw
    p_ck = ckpt + ch * (NCK * NP) + o_in
    if HAS_INIT:
        ha = tl.reshape(tl.load(init + ch * NP + o_in), S3)
        hb = tl.reshape(tl.load(init + (ch + 1) * NP + o_in), S3)
    else:
        ha = tl.zeros(S3, dtype=tl.float32)
        hb = tl.zeros(S3, dtype=tl.float32)
    nxa = _tlane_loads(u, delta, z, row, 0, L, o_t, R, KL, TPL, HAS_Z)
    nxb = _tlane_loads(u, delta, z, row + L, 0, L, o_t, R, KL, TPL, HAS_Z)
    if BC_MODE == 2:
        nbc = _tlane_bc_rows(p_B, p_C, 0, RW, S3W, TPT)
    for t0 in range(0, L, TILE):
        t0 = tl.multiple_of(t0, TILE)
        if t0 % CK == 0:
            tl.store(p_ck + (t0 // CK) * NP, tl.reshape(ha, (R, NP)), mask=row0)
            tl.store(p_ck + NCK * NP + (t0 // CK) * NP, tl.reshape(hb, (R, NP)), mask=row0)
        ua, xa, za = nxa
        ub, xb, zb = nxb
        nxa = _tlane_loads(u, delta, z, row, t0 + TILE, L, o_t, R, KL, TPL, HAS_Z)
        nxb = _tlane_loads(u, delta, z, row + L, t0 + TILE, L, o_t, R, KL, TPL, HAS_Z)
        if BC_MODE == 1:
            rBs, rCs = _tlane_bc_rows(p_B, p_C, t0, RW, S3W, TPT)
        else:
            rBs, rCs = nbc
            nbc = _tlane_bc_rows(p_B, p_C, t0 + TILE, RW, S3W, TPT)
        if PREFETCH_L1:
            _prefetch_tile_l1(Bt, Ct, bc + (t0 + TILE) * RW, o_lane, BC16)
        ha, ya = _tlane_tile(ha, ua, xa, za, b_A2a, b_Da, b_ba, rBs, rCs, t0, L, o_j, o_k, o_k2,
                             o_k3, o_r3, SOFTPLUS, HAS_D, HAS_Z, TL, KL, TPL, SPT)  # fmt: skip
        hb, yb = _tlane_tile(hb, ub, xb, zb, b_A2b, b_Db, b_bb, rBs, rCs, t0, L, o_j, o_k, o_k2,
                             o_k3, o_r3, SOFTPLUS, HAS_D, HAS_Z, TL, KL, TPL, SPT)  # fmt: skip
        m = (t0 + o_t) < L
        p_o = out + row + t0 + o_t
        tl.store(p_o, tl.reshape(ya, (R, TPT)).to(out.dtype.element_ty), mask=m)
        tl.store(p_o + L, tl.reshape(yb, (R, TPT)).to(out.dtype.element_ty), mask=m)
    NC = NCK - 1
    tl.store(p_ck + NC * NP, tl.reshape(ha, (R, NP)), mask=row0)
    tl.store(p_ck + NCK * NP + NC * NP, tl.reshape(hb, (R, NP)), mask=row0)
    tl.store(last + ch * NP + o_in, tl.reshape(ha, (R, NP)), mask=row0)
    tl.store(last + (ch + 1) * NP + o_in, tl.reshape(hb, (R, NP)), mask=row0)


def tile_steps(L: int, W: int = 1) -> int:
    """LP of the time-lane kernel's B / C copies at W warps a channel: whole tiles of W x 64
    steps and one more (the next tile's loads and L1 prefetch), a multiple of 16."""
    return (cdiv(L, TILE * W) + 1) * TILE * W


_SHUFFLE = re.compile(
    r'tt\.elementwise_inline_asm "shfl\.sync\.(?:idx|up|bfly)[^"]*".*?'
    r": tensor<([\dx]+)xi32, (#ttg\.slice<\{[^}]*\}>|#\w+)>"
)


def tlane_layout_problem(ttgir: str) -> str | None:
    """What breaks the time-lane kernel's shuffles (Note [selective scan forward time lanes]) in
    its compiled TTGIR, or None when every shuffle operand has lane bits 0-1 on dimension 1
    (the state lane) and 2-4 on dimension 0 (the time lane), the warp bits on dimension 0's
    next bits (the warp's rows: R = 8 W rows, one warp bit per doubling) and nothing else of
    those two dimensions in registers or warps."""
    aliases = dict(_ALIAS.findall(ttgir))
    found = _SHUFFLE.findall(ttgir)
    if not found:
        return "no shuffle in the TTGIR"
    for shape, enc in set(found):
        rank = len(shape.split("x"))
        try:
            b = _bases(enc, aliases)
        except (KeyError, ValueError, AttributeError):
            return f"a shuffle operand has a layout the check cannot read: {enc}"

        def unit(d: int, v: int, rank: int = rank) -> tuple[int, ...]:
            return tuple(v if i == d else 0 for i in range(rank))

        want = [unit(1, 1), unit(1, 2), unit(0, 1), unit(0, 2), unit(0, 4)]
        # W warps a channel: rows w * 8 + i, w on the warp bits (R = 8 W rows)
        warps = int(shape.split("x")[0]) // 8
        want_w = [unit(0, 8 << m) for m in range(warps.bit_length() - 1)]
        if b["lane"] != want or b["warp"] != want_w or any(v[0] or v[1] for v in b["register"]):
            return f"a shuffle operand ({shape}) has layout {aliases.get(enc, enc)}"
    return None


@functools.cache
def check_tlane_layout() -> Any:
    """A ``launcher`` check: raise ``LaneLayoutError`` on ``tlane_layout_problem``."""

    def check(compiled: Any) -> None:
        problem = tlane_layout_problem(compiled.asm["ttgir"])
        if problem is not None:
            raise LaneLayoutError(
                f"ssmscan's time-lane forward kernel compiled (Triton {triton.__version__}) to a "
                f"layout its shuffles cannot use: {problem}"
            )

    return check
