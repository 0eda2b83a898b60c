"""Forward kernel of ``ssmscan::selective_scan_fwd`` with explicit lane broadcasts (CUDA).

Note [selective scan forward lanes]
-----------------------------------
The same recurrence and outputs as ``_selective_scan_fwd_kernel`` (``triton_fwd``), with the
thread layout written into the shapes instead of left to the compiler: a channel's NP states are
held by KL consecutive lanes of a warp, SPT = NP / KL contiguous states each, so every
state-shaped block is (BLOCK_D, KL, SPT) (state n = k * SPT + s, the memory order) and every
(BLOCK_D, KL, TPL) time tile holds TT = KL * TPL steps, lane k the TPL steps k * TPL .. k * TPL +
TPL - 1. softplus / gate / D are computed once per element, spread over the lanes as before; a
step j's dt and dt * u, needed by all KL lanes of the channel, are then one ``shfl.sync.idx`` from
lane j // TPL (``_lane_bcast``) of the in-thread slot j % TPL (``_slot``, a register pick)
instead of a masked sum over the row (the 2-D kernel's ``_col``: a select and log2(KL) butterfly
shuffles and adds per value). B_t / C_t come from the launcher's time-padded copies (``LP``
steps, a multiple of TT, the pad zero), so their loads need no mask: the padded steps have dt = 0
(decay 1, input 0 * 0). Every input of the next tile (u, delta, z, its 8 B_t and C_t) is loaded
before the current tile computes (``_lane_loads``, carried through the loop; B / C padded by one
more tile for it). With ``BC_ROLL`` (the planner's choice) the next tile's
row j is loaded in ``_fwd_tile_lane`` right after step j, into the registers the current row j
leaves: carried as a whole, ptxas copied the freshly loaded rows into the loop's registers at
its end, and those copies waited out the loads (a third of the local pass's stall samples,
Nsight Compute, 2026-12-02).

A tile's 2 TT broadcasts of dt and dt * u come from one inline asm (``_tile_bcast``,
``BCAST_TILE``; planned for 16-bit inputs): with a
``shfl.sync.idx`` per call Triton's layout pass gave the first step's split another, equivalent
layout than the other steps' and, with 16-bit inputs, computed the tile's softplus chain in both
(3 softplus a thread and tile for its 2 elements; sm_90 SASS at (1, 1536, 4096) bf16 42.8 -> 41.0
instructions a thread-step in the real pass, 31.1 -> 28.8 in the local one; H200, 2026-12-03,
CUDA graphs, bf16 forward 3.5-4% faster at batch 1, 1.8% at (8, 4096, 2048); fp32, which had no
second chain, within 1% either way, so it keeps the per-step shuffles). The backward's states
kernel takes the same broadcasts (and ``_tile_bcast1`` for its dy): with ``ADJ`` in bf16 128
instead of 168 registers.

Staging the next tile's B / C rows through shared memory (a variant of the kernel: one
coalesced (TT, NP) load a program, Triton's layout conversion to the lanes' rows: STS, a
barrier, 16 LDS a thread and tile instead of 16 LDG) frees registers
(the batch-1 real pass 122 -> 96, the local pass 64 -> 48, (8, 4096, 2048) bf16 80) but was
slower where it mattered: H200, 2026-12-03, CUDA graphs, bf16 forward 7% at (1, 1536, 4096),
8% at (1, 1024, 65536), 12% at (8, 4096, 2048); fp32 1% faster at batch 1, 2-5% slower at large
batch. More resident warps did not buy what the barriers and shared-memory loads cost.

Why (H200, 2026-12-01, library op, same process as mamba-ssm, eager ms, lane / 2-D kernel): the
2-D kernel's 58.8 instructions per thread-step (sm_90 SASS at (8, 4096, 2048, 16) fp32; 12 of
them ``_col``'s selects, shuffles and adds, 4 more masked B / C address and zeroing work) are
43.8 here (47.4 bf16, 128 registers); without the prefetch 39.2 at 56 registers, but ptxas then
spreads the B / C loads through the tile instead of issuing them together and the kernel was
slower than the 2-D one at large batch (0.97 vs 0.81 ms fp32). With it: 0.67 vs 0.81 fp32 and
0.73 vs 0.79 bf16 at (8, 4096, 2048, 16); 0.31 vs 0.38 / 0.35 vs 0.37 at (16, 1536, 1024, 16);
1.23 vs 1.50 / 1.15 vs 1.43 at (1, 1024, 65536, 16); 0.14 vs 0.17 / 0.14 vs 0.16 at (1, 1536,
4096, 16) under CUDA graphs (eager batch 1 is host-bound).

At 16 states (KL = 4, TPL = 2) y is reduced over the 4 lanes once per tile, not per step
(``Y_SCATTER``, ``_y_scatter``): each step leaves each lane's partial sum over its 4 states, and
two butterfly rounds reduce the 8 steps and scatter them so that lane k keeps steps 2 k, 2 k + 1
(6 shuffles and adds a tile, not 16, and no per-step select into the tile): sm_90, 46.1 against
47.4 instructions per thread-step at batch 1, 44.8 / 42.4 against 45.0 / 43.9 (bf16 / fp32)
at (8, 4096, 2048). H200, 2026-12-02, CUDA graphs, forward ms, per step -> per tile: (8, 4096,
2048) fp32 0.655 -> 0.637, bf16 0.617 -> 0.586; (16, 1536, 1024) 0.290 -> 0.284, 0.251 ->
0.240; (1, 1536, 4096) 0.129 -> 0.125, 0.116 -> 0.112; (1, 1024, 65536) 1.096 -> 1.082, 1.045
-> 1.045 (capped at 128 registers there: ``Policy.split_regs``).

Where every tile is whole (L % TT == 0) and every program's channels exist, the loop can run
without masks (``EVEN``): the channel mask becomes a constant that
folds away, the step masks and dt's select are dropped, and the next tile's loads are clamped to
the segment's last tile instead of masked; with 32-bit row offsets (``I32``) and u, delta, z two
tiles ahead (``AHEAD`` = 2 with the rolled rows). Fewer instructions (sm_90, (1, 1536, 4096)
bf16: local pass 28.2 -> 26.5 a step), but ptxas schedules the loop differently and the split
passes ran slower; unsplit it is faster ((8, 4096, 2048) bf16 0.533 -> 0.501 ms), so the
planner takes it only where L is not split.
Why slower split (Nsight Compute): without masks ptxas moves the next
tile's element loads to the end of the loop, right before the register rotation that waits on
them, and long-scoreboard stalls grow from 18% to 39-47% of the local pass's samples (14% to
23-40% in the real pass). Masks kept on those loads (a variant of the kernel) move
them back up, as do 64-bit offsets in the two-channel real pass, but no combination made either
split pass faster than the masked loop.

The shuffle relies on the layout Triton derives for these shapes: dimension 1 (k) on KL
consecutive lanes, aligned to KL (``threadsPerWarp`` [32 / KL, KL, 1], the contiguous dimension
last). Loads and stores go through (BLOCK_D, TT) / (BLOCK_D, NP) blocks reshaped to 3-D: with
3-D offsets Triton's coalescing orders the dimensions by contiguity and puts the 32 lanes on the
channels instead (Triton 3.6). ``layout_check.lane_layout_problem`` reads the compiled TTGIR for exactly that
(every shuffle's operand, broadcasts and butterflies, a blocked layout with KL lanes along
dimension 1, fastest); the eager launcher runs it on every kernel it compiles before the first
launch and the launcher falls back to the 2-D kernel if it fails;
``tests/ops/selective_scan/test_triton_fwd_lane.py`` compiles the kernel for sm_90 offline (no
GPU) and checks it too. The GPU tests check every output against
float64 over the test grid; under the interpreter (no inline PTX) the broadcast is the masked sum.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ssmscan.ops.selective_scan.triton_common import _bfly, _sigmoid, _softplus


@triton.jit
def _slot(x, S: tl.constexpr, TPL: tl.constexpr):
    """x[:, :, S] of a (BLOCK_D, KL, TPL) tile as (BLOCK_D, KL): in-thread (``tl.split``)."""
    if TPL == 1:
        return tl.reshape(x, (x.shape[0], x.shape[1]))
    elif TPL == 2:
        a, b = tl.split(x)
        return a if S == 0 else b
    else:  # TPL == 4: step s = 2 * i + j of the lane
        a, b = tl.split(tl.reshape(x, (x.shape[0], x.shape[1], 2, 2)))
        c = a if S % 2 == 0 else b
        e, f = tl.split(c)
        return e if S // 2 == 0 else f


@triton.jit
def _tile_bcast(b_dt, b_du, KL: tl.constexpr, TPL: tl.constexpr):
    """((dt_0, .., dt_TT-1), (du_0, .., du_TT-1)): each step's dt and dt * u of a (BLOCK_D, KL,
    TPL) tile on every lane of its channel, (BLOCK_D, KL) each (step j: lane j // TPL's slot
    j % TPL), from one inline asm of the tile's 2 TT ``shfl.sync.idx`` (compiled, KL > 1 only).
    A shuffle per call (``_lane_bcast``) left Triton's layout pass a choice per step: with 16-bit
    inputs it gave the first step's slots another layout of the same registers and computed the
    tile's softplus chain in both (sm_90 SASS: 3 softplus a thread and tile for 2 elements, 4.62
    MUFU.EX2 a step for 4.5; Note [selective scan forward lanes])."""
    dts = ()
    dus = ()
    ins = ()
    for s in tl.static_range(TPL):
        ins = ins + (_slot(b_dt, s, TPL).to(tl.int32, bitcast=True),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    for s in tl.static_range(TPL):
        ins = ins + (_slot(b_du, s, TPL).to(tl.int32, bitcast=True),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    if KL == 2:  # TPL = 4
        r = tl.inline_asm_elementwise(
            "shfl.sync.idx.b32 $0, $16, 0, 0x1e1f, -1; shfl.sync.idx.b32 $1, $17, 0, 0x1e1f, -1; shfl.sync.idx.b32 $2, $18, 0, 0x1e1f, -1; shfl.sync.idx.b32 $3, $19, 0, 0x1e1f, -1; "
            "shfl.sync.idx.b32 $4, $16, 1, 0x1e1f, -1; shfl.sync.idx.b32 $5, $17, 1, 0x1e1f, -1; shfl.sync.idx.b32 $6, $18, 1, 0x1e1f, -1; shfl.sync.idx.b32 $7, $19, 1, 0x1e1f, -1; "
            "shfl.sync.idx.b32 $8, $20, 0, 0x1e1f, -1; shfl.sync.idx.b32 $9, $21, 0, 0x1e1f, -1; shfl.sync.idx.b32 $10, $22, 0, 0x1e1f, -1; shfl.sync.idx.b32 $11, $23, 0, 0x1e1f, -1; "
            "shfl.sync.idx.b32 $12, $20, 1, 0x1e1f, -1; shfl.sync.idx.b32 $13, $21, 1, 0x1e1f, -1; shfl.sync.idx.b32 $14, $22, 1, 0x1e1f, -1; shfl.sync.idx.b32 $15, $23, 1, 0x1e1f, -1;",
            "=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r,r,r",
            ins,
            dtype=(tl.int32,) * 16,
            is_pure=True,
            pack=1,
        )
    elif KL == 4:  # TPL = 2
        r = tl.inline_asm_elementwise(
            "shfl.sync.idx.b32 $0, $16, 0, 0x1c1f, -1; shfl.sync.idx.b32 $1, $17, 0, 0x1c1f, -1; shfl.sync.idx.b32 $2, $16, 1, 0x1c1f, -1; shfl.sync.idx.b32 $3, $17, 1, 0x1c1f, -1; "
            "shfl.sync.idx.b32 $4, $16, 2, 0x1c1f, -1; shfl.sync.idx.b32 $5, $17, 2, 0x1c1f, -1; shfl.sync.idx.b32 $6, $16, 3, 0x1c1f, -1; shfl.sync.idx.b32 $7, $17, 3, 0x1c1f, -1; "
            "shfl.sync.idx.b32 $8, $18, 0, 0x1c1f, -1; shfl.sync.idx.b32 $9, $19, 0, 0x1c1f, -1; shfl.sync.idx.b32 $10, $18, 1, 0x1c1f, -1; shfl.sync.idx.b32 $11, $19, 1, 0x1c1f, -1; "
            "shfl.sync.idx.b32 $12, $18, 2, 0x1c1f, -1; shfl.sync.idx.b32 $13, $19, 2, 0x1c1f, -1; shfl.sync.idx.b32 $14, $18, 3, 0x1c1f, -1; shfl.sync.idx.b32 $15, $19, 3, 0x1c1f, -1;",
            "=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r",
            ins,
            dtype=(tl.int32,) * 16,
            is_pure=True,
            pack=1,
        )
    else:  # KL = 8, TPL = 1
        r = tl.inline_asm_elementwise(
            "shfl.sync.idx.b32 $0, $16, 0, 0x181f, -1; shfl.sync.idx.b32 $1, $16, 1, 0x181f, -1; shfl.sync.idx.b32 $2, $16, 2, 0x181f, -1; shfl.sync.idx.b32 $3, $16, 3, 0x181f, -1; "
            "shfl.sync.idx.b32 $4, $16, 4, 0x181f, -1; shfl.sync.idx.b32 $5, $16, 5, 0x181f, -1; shfl.sync.idx.b32 $6, $16, 6, 0x181f, -1; shfl.sync.idx.b32 $7, $16, 7, 0x181f, -1; "
            "shfl.sync.idx.b32 $8, $17, 0, 0x181f, -1; shfl.sync.idx.b32 $9, $17, 1, 0x181f, -1; shfl.sync.idx.b32 $10, $17, 2, 0x181f, -1; shfl.sync.idx.b32 $11, $17, 3, 0x181f, -1; "
            "shfl.sync.idx.b32 $12, $17, 4, 0x181f, -1; shfl.sync.idx.b32 $13, $17, 5, 0x181f, -1; shfl.sync.idx.b32 $14, $17, 6, 0x181f, -1; shfl.sync.idx.b32 $15, $17, 7, 0x181f, -1;",
            "=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,r,r",
            ins,
            dtype=(tl.int32,) * 16,
            is_pure=True,
            pack=1,
        )
    for j in tl.static_range(KL * TPL):
        dts = dts + (r[j].to(tl.float32, bitcast=True),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        dus = dus + (r[KL * TPL + j].to(tl.float32, bitcast=True),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    return dts, dus


@triton.jit
def _tile_bcast1(x, KL: tl.constexpr, TPL: tl.constexpr):
    """``_tile_bcast`` of one (BLOCK_D, KL, TPL) tile: (x_0, .., x_TT-1), one asm of TT shuffles
    (the states kernel's dy)."""
    ins = ()
    for s in tl.static_range(TPL):
        ins = ins + (_slot(x, s, TPL).to(tl.int32, bitcast=True),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    if KL == 2:  # TPL = 4
        r = tl.inline_asm_elementwise(
            "shfl.sync.idx.b32 $0, $8, 0, 0x1e1f, -1; shfl.sync.idx.b32 $1, $9, 0, 0x1e1f, -1; shfl.sync.idx.b32 $2, $10, 0, 0x1e1f, -1; shfl.sync.idx.b32 $3, $11, 0, 0x1e1f, -1; "
            "shfl.sync.idx.b32 $4, $8, 1, 0x1e1f, -1; shfl.sync.idx.b32 $5, $9, 1, 0x1e1f, -1; shfl.sync.idx.b32 $6, $10, 1, 0x1e1f, -1; shfl.sync.idx.b32 $7, $11, 1, 0x1e1f, -1;",
            "=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r",
            ins,
            dtype=(tl.int32,) * 8,
            is_pure=True,
            pack=1,
        )
    elif KL == 4:  # TPL = 2
        r = tl.inline_asm_elementwise(
            "shfl.sync.idx.b32 $0, $8, 0, 0x1c1f, -1; shfl.sync.idx.b32 $1, $9, 0, 0x1c1f, -1; shfl.sync.idx.b32 $2, $8, 1, 0x1c1f, -1; shfl.sync.idx.b32 $3, $9, 1, 0x1c1f, -1; "
            "shfl.sync.idx.b32 $4, $8, 2, 0x1c1f, -1; shfl.sync.idx.b32 $5, $9, 2, 0x1c1f, -1; shfl.sync.idx.b32 $6, $8, 3, 0x1c1f, -1; shfl.sync.idx.b32 $7, $9, 3, 0x1c1f, -1;",
            "=r,=r,=r,=r,=r,=r,=r,=r,r,r",
            ins,
            dtype=(tl.int32,) * 8,
            is_pure=True,
            pack=1,
        )
    else:  # KL = 8, TPL = 1
        r = tl.inline_asm_elementwise(
            "shfl.sync.idx.b32 $0, $8, 0, 0x181f, -1; shfl.sync.idx.b32 $1, $8, 1, 0x181f, -1; shfl.sync.idx.b32 $2, $8, 2, 0x181f, -1; shfl.sync.idx.b32 $3, $8, 3, 0x181f, -1; "
            "shfl.sync.idx.b32 $4, $8, 4, 0x181f, -1; shfl.sync.idx.b32 $5, $8, 5, 0x181f, -1; shfl.sync.idx.b32 $6, $8, 6, 0x181f, -1; shfl.sync.idx.b32 $7, $8, 7, 0x181f, -1;",
            "=r,=r,=r,=r,=r,=r,=r,=r,r",
            ins,
            dtype=(tl.int32,) * 8,
            is_pure=True,
            pack=1,
        )
    xs = ()
    for j in tl.static_range(KL * TPL):
        xs = xs + (r[j].to(tl.float32, bitcast=True),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    return xs


@triton.jit
def _lane_bcast(v, o_k, K: tl.constexpr, KL: tl.constexpr, PTX: tl.constexpr):
    """Every lane of a channel gets lane K's element of v (BLOCK_D, KL): with PTX one
    ``shfl.sync.idx`` within segments of KL lanes (``c`` = segment mask << 8 | clamp); else a
    masked sum (shape (BLOCK_D, 1))."""
    if KL == 1:
        return v
    elif PTX:
        vi = v.to(tl.int32, bitcast=True)
        src = tl.full(v.shape, K, tl.int32)
        seg = tl.full(v.shape, ((32 - KL) << 8) | 0x1F, tl.int32)
        r = tl.inline_asm_elementwise(
            "shfl.sync.idx.b32 $0, $1, $2, $3, -1;",
            "=r,r,r,r",
            [vi, src, seg],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
        return r.to(tl.float32, bitcast=True)
    else:
        return tl.sum(tl.where(o_k[None, :] == K, v, 0.0), axis=1)[:, None]


@triton.jit
def _k_xor(x, M: tl.constexpr, o_k2, PTX: tl.constexpr):
    """x (rows, KL) of lane k ^ M within the channel's lanes (with PTX ``shfl.sync.bfly``; else
    a gather, o_k2: (1, KL) lane index)."""
    if PTX:
        return _bfly(x, M)
    else:
        return tl.gather(x, tl.broadcast_to(o_k2 ^ M, x.shape), axis=1)


@triton.jit
def _y_scatter(ys, o_k2, PTX: tl.constexpr):
    """The 8 steps' y of a tile from ``ys``, 8 (rows, KL = 4) per-lane partial sums (lane k's
    states), reduced over the 4 lanes and scattered so that lane k keeps steps 2 k, 2 k + 1:
    (rows, 4, 2), a (rows, KL, TPL) tile. Two butterfly rounds: lanes 2 apart exchange the
    half of the steps the other keeps (4 shuffles), then lanes 1 apart (2): 6 shuffles and
    adds for the 8 steps, where a full reduction per step takes 16."""
    hi = ((o_k2 >> 1) & 1) == 1
    r = ()
    for m in tl.static_range(4):
        keep = tl.where(hi, ys[4 + m], ys[m])
        send = tl.where(hi, ys[m], ys[4 + m])
        r = r + (keep + _k_xor(send, 2, o_k2, PTX),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    odd = (o_k2 & 1) == 1
    # (mypy sees r as the empty tuple it starts as)
    y0 = tl.where(odd, r[2], r[0]) + _k_xor(tl.where(odd, r[0], r[2]), 1, o_k2, PTX)  # type: ignore[misc]
    y1 = tl.where(odd, r[3], r[1]) + _k_xor(tl.where(odd, r[1], r[3]), 1, o_k2, PTX)  # type: ignore[misc]
    return tl.join(y0, y1)


@triton.jit
def _lane_loads(
    u,
    delta,
    z,
    p_B,
    p_C,
    row,
    m_d,
    t0,
    t_end,
    NP: tl.constexpr,
    KL: tl.constexpr,
    TPL: tl.constexpr,
    HAS_Z: tl.constexpr,
    LOCAL: tl.constexpr,
):
    """The inputs of the TT = KL * TPL steps from t0 (Note [selective scan forward lanes]): u,
    delta, z (u when there is none) as loaded, (BLOCK_D, KL, TPL); B_t / C_t (1, KL, SPT) fp32,
    time-padded, no mask (C: B's when LOCAL)."""
    b_u, b_x, b_z = _lane_elem_loads(u, delta, z, row, m_d, t0, t_end, KL, TPL, HAS_Z, LOCAL)
    Bs, Cs = _lane_bc_loads(u, p_B, p_C, t0, NP, KL, TPL, LOCAL)
    return b_u, b_x, b_z, Bs, Cs


@triton.jit
def _lane_elem_loads(u, delta, z, row, m_d, t0, t_end, KL: tl.constexpr, TPL: tl.constexpr,
                     HAS_Z: tl.constexpr, LOCAL: tl.constexpr):  # fmt: skip
    """``_lane_loads``' u, delta, z (u when there is none or LOCAL), (BLOCK_D, KL, TPL); t_end
    None: no step mask (``EVEN``)."""
    TT: tl.constexpr = KL * TPL
    T3: tl.constexpr = (row.shape[0], KL, TPL)
    # loads as (BLOCK_D, TT), reshaped: the layout Triton gives them puts a row's TT steps on KL
    # consecutive lanes (3-D offsets get the channels on the lanes instead)
    o_tt = t0 + tl.arange(0, TT)
    if t_end is None:
        m2 = m_d[:, None]
    else:
        m2 = m_d[:, None] & (o_tt < t_end)[None, :]
    p = row[:, None] + o_tt[None, :]  # (BLOCK_D, TT)
    b_u = tl.reshape(tl.load(u + p, mask=m2, other=0.0), T3)
    b_x = tl.reshape(tl.load(delta + p, mask=m2, other=0.0), T3)
    if HAS_Z and not LOCAL:
        b_z = tl.reshape(tl.load(z + p, mask=m2, other=0.0), T3)
    else:
        b_z = b_u
    return b_u, b_x, b_z


@triton.jit
def _lane_bc_loads(u, p_B, p_C, t0, NP: tl.constexpr, KL: tl.constexpr, TPL: tl.constexpr,
                   LOCAL: tl.constexpr):  # fmt: skip
    """``_lane_loads``' B_t / C_t rows of the tile from t0 (u: for its dtype only)."""
    TT: tl.constexpr = KL * TPL
    Bs = ()
    Cs = ()
    # 16-bit inputs: the tile's rows from one pointer each, step j at a constant offset from it
    # (one address computation per tile, not per step; ptxas then issues the 16 loads together).
    # fp32 keeps a pointer per step: the same change made it slower there (H200, 2026-12-02,
    # CUDA graphs, forward ms, per step -> per tile: (8, 4096, 2048) fp32 0.656 -> 0.699, bf16
    # 0.653 -> 0.619; (16, 1536, 1024) fp32 0.292 -> 0.321, bf16 0.282 -> 0.253)
    ROW_PTR: tl.constexpr = u.dtype.element_ty != tl.float32
    q_B = p_B + t0 * NP
    q_C = p_C + t0 * NP
    for j in tl.static_range(TT):
        if ROW_PTR:
            pB_j = q_B + j * NP
            pC_j = q_C + j * NP
        else:
            pB_j = p_B + (t0 + j) * NP
            pC_j = p_C + (t0 + j) * NP
        b_B = tl.reshape(tl.load(pB_j), (1, KL, NP // KL))
        Bs = Bs + (b_B,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        if not LOCAL:
            Cs = Cs + (tl.reshape(tl.load(pC_j), (1, KL, NP // KL)),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        else:
            Cs = Cs + (b_B,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    return Bs, Cs


# Note [selective scan forward 16-bit rows]
# ------------------------------------------
# Where B and C come in u's bf16 / fp16 (the usual case: x_proj's output), ``prep_BC_lane`` can
# copy their time-padded rows in that dtype instead of fp32 (exact: no value changes), and a step
# converts its row where it uses it (``_bc_f32``). bf16 rows travel as int32 words of two states
# (``BC16`` = 1): (w << 16) is the even state's fp32 bits and (w & 0xffff0000) the odd one's,
# one instruction each; fp16 rows (``BC16`` = 2) are converted by the compiler. Half the row
# bytes, half the rows' L1 wavefronts (LDG.64 instead of LDG.128) and half the registers the
# rolled rows hold. sm_90 at (1, 1536, 4096) bf16 (``sass_report.py --bc16``): the two-channel
# real pass 161 -> 128 registers (6 -> 8 two-warp programs a multiprocessor), 38.2 -> 40.8
# instructions a channel-step; the one-channel real pass 123 -> 72, 40.6 -> 48.5 a step; the
# local pass 64 -> 48, 28.2 -> 32.2. H200 (2026-12-03): the passes
# got slower at batch 1 (local 39.0 -> 40.7 us, real 52.2 -> 54.4: the extra instructions cost
# more than the warps and wavefronts saved, as with every occupancy lever before), and where
# the registers change the waves it wins: at (8, 4096, 2048) the two-channel pass's 1024
# programs fill 0.97 of a wave at 128 registers instead of 1.29 waves at 160, 0.535 against
# 0.571 ms. So the planner takes them only there (``plan.ch2_rows16``; ``Policy.rows16``).
@triton.jit
def _bc_f32(x, SPT: tl.constexpr):
    """A B / C row as ``_lane_bc_loads`` loaded it -> (1, KL, SPT) fp32, converted where it is
    used (Note [selective scan forward 16-bit rows]): bf16 pairs in int32 words (``BC16`` = 1)
    by two bit operations, low half the even state; 16-bit floats (2) by a conversion; fp32 as
    it is."""
    if x.dtype == tl.int32:
        lo = (x << 16).to(tl.float32, bitcast=True)
        hi = (x & -65536).to(tl.float32, bitcast=True)
        return tl.reshape(tl.join(lo, hi), (1, x.shape[1], SPT))
    else:
        return x.to(tl.float32)


@triton.jit
def _fwd_tile_lane(
    h,
    ins,
    b_A2,
    out,
    b_bias,
    b_D,
    row,
    m_d,
    o_k,
    o_j,
    t0,
    t_end,
    dt_sum,
    SOFTPLUS: tl.constexpr,
    KL: tl.constexpr,
    TPL: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    LOCAL: tl.constexpr,
    PTX: tl.constexpr,
    Y_SCATTER: tl.constexpr = False,
    ROLL: tl.constexpr = False,
    q_B=None,
    q_C=None,
    BCAST_TILE: tl.constexpr = False,
):
    """TT = KL * TPL steps t0 .. t0 + TT - 1 from their inputs ``ins`` (``_lane_loads``; Note
    [selective scan forward lanes]); stores y unless LOCAL. o_j (1, KL, TPL): a tile element's
    step within the tile. Returns (h, dt_sum, the next tile's B rows, its C rows): the rows
    (loaded from q_B / q_C, row j after step j) only with ROLL, else empty tuples."""
    TT: tl.constexpr = KL * TPL
    BLOCK_D: tl.constexpr = row.shape[0]
    b_u, b_dt, b_z, Bs, Cs = ins
    b_u = b_u.to(tl.float32)
    b_dt = b_dt.to(tl.float32)
    if HAS_BIAS:
        b_dt += b_bias[:, None, None]
    if SOFTPLUS:
        b_dt = _softplus(b_dt)
    if t_end is not None:  # (None: ``EVEN``, no padded steps)
        m = m_d[:, None, None] & (t0 + o_j < t_end)
        b_dt = tl.where(m, b_dt, 0.0)  # padded steps: decay 1, input 0
    if LOCAL:
        dt_sum += tl.sum(tl.sum(b_dt, axis=2), axis=1)
    b_du = b_dt * b_u
    # y: at KL = 4 and TPL = 2 (16 states) each lane's partial sums, reduced and scattered over
    # the lanes once per tile (``_y_scatter``); else reduced per step
    SCATTER: tl.constexpr = Y_SCATTER and KL == 4 and TPL == 2
    b_y = tl.zeros_like(b_u)
    ys = ()
    nBs = ()
    nCs = ()
    SH: tl.constexpr = (1, KL, Bs[0].shape[2])  # a B / C row as loaded (ROLL)
    NPL: tl.constexpr = KL * Bs[0].shape[2]
    SPT: tl.constexpr = b_A2.shape[2]
    ONE: tl.constexpr = BCAST_TILE and PTX and KL > 1  # the tile's shuffles in one asm
    if ONE:
        bdts, bdus = _tile_bcast(b_dt, b_du, KL, TPL)
    for j in tl.static_range(TT):
        if ONE:
            b_dtj = bdts[j][:, :, None]
            b_duj = bdus[j][:, :, None]
        else:
            b_dtj = _lane_bcast(_slot(b_dt, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
            b_duj = _lane_bcast(_slot(b_du, j % TPL, TPL), o_k, j // TPL, KL, PTX)[:, :, None]
        h = tl.exp2(b_dtj * b_A2) * h + b_duj * _bc_f32(Bs[j], SPT)
        if not LOCAL:
            if SCATTER:
                ys = ys + (tl.sum(h * _bc_f32(Cs[j], SPT), axis=2),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            else:
                b_yj = tl.sum(tl.sum(h * _bc_f32(Cs[j], SPT), axis=2), axis=1)
                b_y = tl.where(o_j == j, b_yj[:, None, None], b_y)
        if ROLL:  # the next tile's row j, into the registers row j has just left
            nBs = nBs + (tl.reshape(tl.load(q_B + j * NPL), SH),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            if not LOCAL:
                nCs = nCs + (tl.reshape(tl.load(q_C + j * NPL), SH),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            else:
                nCs = nCs + (nBs[j],)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    if not LOCAL:
        if SCATTER:
            b_y = _y_scatter(ys, o_k[None, :], PTX)
        if HAS_D:
            b_y += b_D[:, None, None] * b_u
        if HAS_Z:
            b_z = b_z.to(tl.float32)
            b_y *= b_z * _sigmoid(b_z, PTX)
        o_tt = t0 + tl.arange(0, TT)
        p = row[:, None] + o_tt[None, :]
        if t_end is None:
            m2 = m_d[:, None]
        else:
            m2 = m_d[:, None] & (o_tt < t_end)[None, :]
        tl.store(out + p, tl.reshape(b_y, (BLOCK_D, TT)).to(out.dtype.element_ty), mask=m2)
    return h, dt_sum, nBs, nCs  # the next tile's B / C rows with ROLL, else ()


@triton.jit
def fold_segments(h, seg_state, seg_dt, b_A2, i_b, NSEG, s0, count, DIR: tl.constexpr, dim, o_d,
                  m_d):  # fmt: skip
    """h folded over the ``count`` segments s0, s0 + DIR, ... (Note [selective scan segments]):
    h = exp2(A2 sum dt_s) h + S_s, S_s the segment's state (forward) or adjoint (backward) from
    zero in a (batch, NSEG, dim, NP) buffer, sum dt_s in a (batch, NSEG, dim) one; h and b_A2
    (BLOCK_D, KL, SPT). Four segments' loads are issued before their four steps (one load
    latency per four segments, not per segment); the padding steps of a last group load zeros,
    and exp2(0) h + 0 is h exactly."""
    NP: tl.constexpr = h.shape[1] * h.shape[2]
    o_dn = o_d[:, None] * NP + tl.arange(0, NP)[None, :]
    m_dn = m_d[:, None]
    for q in range(0, tl.cdiv(count, 4)):
        locs = ()
        sdts = ()
        for r in tl.static_range(4):
            j = q * 4 + r
            s = s0 + j * DIR
            ok = j < count
            p_loc = seg_state + (i_b * NSEG + s) * (dim * NP) + o_dn
            locs = locs + (tl.reshape(tl.load(p_loc, mask=m_dn & ok, other=0.0), h.shape),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
            p_dt = seg_dt + (i_b * NSEG + s) * dim + o_d
            sdts = sdts + (tl.load(p_dt, mask=m_d & ok, other=0.0),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        for r in tl.static_range(4):
            h = tl.exp2(sdts[r][:, None, None] * b_A2) * h + locs[r]
    return h


@triton.jit
def store_record(h, dt_sum, seg_state, seg_dt, i_b, NSEG, s, dim, o_d, m_d):
    """A local pass's (state, sum of dt) as record s of the segments' buffers."""
    NP: tl.constexpr = h.shape[1] * h.shape[2]
    o_dn = o_d[:, None] * NP + tl.arange(0, NP)[None, :]
    p_seg = seg_state + (i_b * NSEG + s) * (dim * NP) + o_dn
    tl.store(p_seg, tl.reshape(h, (h.shape[0], NP)), mask=m_d[:, None])
    tl.store(seg_dt + (i_b * NSEG + s) * dim + o_d, dt_sum, mask=m_d)


@triton.jit
def _selective_scan_fwd_lane_kernel(
    u,  # (batch, dim, L) input
    delta,  # (batch, dim, L) time step before bias / softplus
    A2,  # (dim, NP) fp32, A * log2(e), zero-padded states; A itself if A_RAW
    Bt,  # (batch, G, LP, NP) B time-major, zero-padded states and steps: fp32 or as BC16 says
    Ct,  # (batch, G, LP, NP) C time-major, as Bt
    Dv,  # (dim,) fp32 skip weight, or None
    z,  # (batch, dim, L) gate, or None
    delta_bias,  # (dim,) fp32, or None
    init,  # (batch, dim, NP) fp32 initial state (padded), or None
    out,  # (batch, dim, L) output, u's dtype
    ckpt,  # (batch, dim, NCK, NP) fp32: state before each chunk, last entry the final state
    # segment end states from zero, (batch, NSEG, dim, NP) fp32 (LOCAL: out; the local pass
    # writes all but the last segment's), or None
    seg_state,
    seg_dt,  # (batch, NSEG, dim) fp32 sums of dt over the segments (as seg_state), or None
    last,  # (batch, dim, NP) fp32 out: the final state, or None
    dim,  # channels
    L,  # sequence length
    LP,  # steps of Bt / Ct: L rounded up to a multiple of TT = KL * TPL, plus TT
    N,  # states
    G,  # groups of B / C
    NCK,  # checkpoint entries = cdiv(L, CK) + 1
    SEG,  # checkpoint chunks per segment (program axis 2), tiles with SEG_T
    SOFTPLUS: tl.constexpr,  # dt = softplus(delta + bias)
    NP: tl.constexpr,  # padded states, power of two
    CK: tl.constexpr,  # checkpoint chunk length, multiple of KL * TPL
    BLOCK_D: tl.constexpr,  # channels per program
    KL: tl.constexpr,  # lanes per channel
    TPL: tl.constexpr,  # steps per lane and tile
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    LOCAL: tl.constexpr,  # pass 1 of Note [selective scan segments]: from zero, no outputs
    SPLIT: tl.constexpr,  # several segments (program axis 2)
    A_RAW: tl.constexpr,  # A2 is A: scaled by log2(e) here (the same fp32 product)
    HAS_LAST: tl.constexpr,  # also write the final state to ``last``
    PTX: tl.constexpr,  # inline PTX (shuffles, ``rcp``); else portable ``tl`` code
    # y reduced over a tile's lanes once per tile (``_y_scatter``; 16 states)
    Y_SCATTER: tl.constexpr = False,
    # tiles ahead that u, delta, z are loaded (1, or 2 with EVEN; B / C rows: one)
    AHEAD: tl.constexpr = 1,
    # the next tile's B / C row j loaded right after step j, into the registers row j leaves
    BC_ROLL: tl.constexpr = False,
    BCAST_TILE: tl.constexpr = False,  # a tile's dt / dt * u broadcasts in one asm (``_tile_bcast``)
    SEG_T: tl.constexpr = False,  # SEG counts tiles, not checkpoint chunks
    # Bt / Ct rows in 16 bits (Note [selective scan forward 16-bit rows]): 1 bf16 pairs as int32
    # words, 2 fp16; 0 fp32
    BC16: tl.constexpr = 0,
    # local segments per real one: the local pass runs FOLD times as many segments, FOLD times
    # shorter (those of the last real segment not at all), and the real pass folds FOLD local
    # states per earlier real segment
    FOLD: tl.constexpr = 1,
    # every tile whole (L % TT == 0) and every program's channels there (dim % BLOCK_D == 0): the
    # loop's loads, stores and dt without masks, the next tile's loads clamped to the segment
    EVEN: tl.constexpr = False,
    I32: tl.constexpr = False,  # batch * dim * L < 2^31: 32-bit offsets of the rows
):
    SPT: tl.constexpr = NP // KL
    TT: tl.constexpr = KL * TPL
    RW: tl.constexpr = NP // 2 if BC16 == 1 else NP  # a B / C row's elements in Bt / Ct
    tl.static_assert(BC_ROLL or not EVEN, "EVEN: with the rolled rows")
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    i_s = tl.program_id(2)
    NSEG = tl.num_programs(2)
    if LOCAL:  # no program for the last segment: no later one reads its end state
        NSEG = (NSEG // FOLD + 1) * FOLD
    else:
        NSEG = NSEG * FOLD  # the local segments' buffer
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    if EVEN:  # a constant mask: the loads' and stores' masks fold away
        m_d = tl.full((BLOCK_D,), 1, tl.int1)
    else:
        m_d = o_d < dim
    o_k = tl.arange(0, KL)
    o_n = tl.arange(0, NP)
    # a tile's step k * TPL + s (1, KL, TPL)
    o_j = (o_k[:, None] * TPL + tl.arange(0, TPL)[None, :])[None, :, :]
    # state-shaped blocks are (BLOCK_D, KL, SPT), state n = k * SPT + s; loaded and stored as
    # (BLOCK_D, NP) and reshaped, as the tiles (``_fwd_tile_lane``)
    S3: tl.constexpr = (BLOCK_D, KL, SPT)
    m_dn = m_d[:, None]
    o_dn = o_d[:, None] * NP + o_n[None, :]  # (BLOCK_D, NP) in a (dim, NP) buffer

    b_A2 = tl.reshape(tl.load(A2 + o_dn, mask=m_dn, other=0.0), S3)
    if A_RAW:
        b_A2 = b_A2 * 1.4426950408889634
    b_D = tl.load(Dv + o_d, mask=m_d, other=0.0) if HAS_D else None
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0) if HAS_BIAS else None

    if I32:
        row = (tl.program_id(1) * dim + o_d) * L  # (BLOCK_D,) offsets of the rows
    else:
        row = (i_b * dim + o_d.to(tl.int64)) * L
    grp = (i_d * BLOCK_D) // (dim // G)  # a block never straddles two groups
    bc = (i_b * G + grp) * LP * RW  # B_t / C_t of this program's group: broadcast loads
    p_B = Bt + bc + tl.arange(0, RW)  # (RW,)
    p_C = Ct + bc + tl.arange(0, RW)
    # entry c of channel d at p_ck + c * NP
    p_ck = ckpt + (i_b * dim + o_d.to(tl.int64))[:, None] * (NCK * NP) + o_n[None, :]

    NC = NCK - 1  # chunks
    if SPLIT and SEG_T:  # segments of SEG tiles (checkpoints where t0 % CK == 0, as ever)
        t_beg = i_s * (SEG * TT)
        t_end = tl.minimum(t_beg + SEG * TT, L)
    elif SPLIT:
        t_beg = i_s * SEG * CK
        t_end = tl.minimum(t_beg + SEG * CK, L)
    else:  # one segment: plain bounds (the min() bounds cost 17-20% of the time, H200)
        t_beg = 0
        t_end = L
    dt_sum = tl.zeros((BLOCK_D,), dtype=tl.float32)  # LOCAL only
    if LOCAL:
        h = tl.zeros(S3, dtype=tl.float32)
    else:
        if HAS_INIT:
            h = tl.reshape(tl.load(init + i_b * dim * NP + o_dn, mask=m_dn, other=0.0), S3)
        else:
            h = tl.zeros(S3, dtype=tl.float32)
        if SPLIT:  # the carry pass, here: h_{s+1} = exp(A sum dt_s) h_s + local_s up to i_s
            h = fold_segments(h, seg_state, seg_dt, b_A2, i_b, NSEG, 0, i_s * FOLD, 1, dim, o_d,
                              m_d)  # fmt: skip
    # the next tile's inputs load while this one computes (B / C padded for it); with AHEAD = 2
    # u, delta, z two tiles ahead (a register or two each: ptxas issues the next tile's loads
    # late in the iteration)
    if EVEN:  # the masks' end: none (whole tiles)
        t_m = None
    else:
        t_m = t_end
    nxt = _lane_loads(u, delta, z, p_B, p_C, row, m_d, t_beg, t_m, RW, KL, TPL, HAS_Z, LOCAL)
    if AHEAD == 2:
        if EVEN:
            nxe = _lane_elem_loads(u, delta, z, row, m_d, tl.minimum(t_beg + TT, t_end - TT),
                                   None, KL, TPL, HAS_Z, LOCAL)  # fmt: skip
        else:
            nxe = _lane_elem_loads(u, delta, z, row, m_d, t_beg + TT, t_end, KL, TPL, HAS_Z, LOCAL)
    # (not unrolled: unrolling by two was slower on the H200, 168 registers in the real pass)
    for t0 in tl.range(t_beg, t_end, TT, loop_unroll_factor=1):
        t0 = tl.multiple_of(t0, TT)
        if not LOCAL:
            if t0 % CK == 0:
                tl.store(p_ck + (t0 // CK) * NP, tl.reshape(h, (BLOCK_D, NP)), mask=m_dn)
        if BC_ROLL:  # u, delta, z of the next tile here, its B / C rows in the tile
            ins = nxt
            if EVEN:  # (the segment's last tile again after its last: no mask, in bounds)
                t_nx = tl.minimum(t0 + AHEAD * TT, t_end - TT)
            else:
                t_nx = t0 + AHEAD * TT
            if AHEAD == 2:  # (u, delta, z two tiles ahead, B / C rows one)
                e_u, e_x, e_z = nxe
                nxe = _lane_elem_loads(u, delta, z, row, m_d, t_nx, t_m, KL, TPL, HAS_Z, LOCAL)
            else:
                e_u, e_x, e_z = _lane_elem_loads(
                    u, delta, z, row, m_d, t_nx, t_m, KL, TPL, HAS_Z, LOCAL
                )
        else:  # the whole next tile loaded a tile ahead
            ins = nxt
            nxt = _lane_loads(
                u, delta, z, p_B, p_C, row, m_d, t0 + TT, t_end, RW, KL, TPL, HAS_Z, LOCAL
            )
        h, dt_sum, n_B, n_C = _fwd_tile_lane(
            h, ins, b_A2, out, b_bias, b_D, row, m_d, o_k, o_j, t0, t_m, dt_sum, SOFTPLUS,
            KL, TPL, HAS_D, HAS_Z, HAS_BIAS, LOCAL, PTX, Y_SCATTER, BC_ROLL,
            p_B + (t0 + TT) * RW, p_C + (t0 + TT) * RW, BCAST_TILE,
        )  # fmt: skip
        if BC_ROLL:
            nxt = (e_u, e_x, e_z, n_B, n_C)
    if LOCAL:
        store_record(h, dt_sum, seg_state, seg_dt, i_b, NSEG, i_s, dim, o_d, m_d)
    elif t_end == L:  # the last segment
        tl.store(p_ck + NC * NP, tl.reshape(h, (BLOCK_D, NP)), mask=m_dn)  # the final entry
        if HAS_LAST:
            tl.store(last + i_b * dim * NP + o_dn, tl.reshape(h, (BLOCK_D, NP)), mask=m_dn)
