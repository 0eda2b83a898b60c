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
it with the segment split (more warps, the local pass as the maps' scan) is the untried step.

Nsight Compute (2026-12-02, (1, 1536, 4096) bf16, ``--clock-control none``): 43.9M instructions
against the split's 62.2M (local 23.8M + real 38.4M), but 11.6 warps per multiprocessor
(occupancy 18%), 0.55 eligible warps per scheduler, issue slots 31-36% busy, where the split's
passes run 50-55% busy at 1.0-1.2 eligible. Loading a tile's 16 B / C rows at its top
(``BC_MODE`` 1) took the kernel from 136 to 125 us there, but was slower at (1, 1024, 65536);
more warps per channel (the states split over two warps, y summed across them) is what the
figures point at, not yet written.
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
    _bfly,
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
)

TL = 8  # time lanes per channel (lane bits 2-4)
TPT = 8  # steps per time lane and tile
TILE = TL * TPT  # steps per tile


@triton.jit
def _rows_up(x, D: tl.constexpr, o_i):
    """Row i - D's x for rows i >= D (lane - 4 D: rows are lane bits 2-4); rows below D get
    their own on the GPU, row 0's interpreted (a gather): callers mask them either way."""
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
        idx = tl.broadcast_to(tl.maximum(o_i - D, 0), x.shape)
        return tl.gather(x, idx, axis=0)


@triton.jit
def _rows_last(x, o_k):
    """Every row gets row TL - 1's x (lane 28 + k's: ``shfl.sync.idx``). Interpreted: a
    gather."""
    if _PTX:
        xi = x.to(tl.int32, bitcast=True)
        src = tl.broadcast_to(28 + o_k, x.shape)
        r = tl.inline_asm_elementwise(
            "shfl.sync.idx.b32 $0, $1, $2, 0x1f, -1;", "=r,r,r", [xi, src], tl.int32, True, 1
        )
        return r.to(tl.float32, bitcast=True)
    else:
        idx = tl.full(x.shape, x.shape[0] - 1, tl.int32)
        return tl.gather(x, idx, axis=0)


@triton.jit
def _k_xor(x, M: tl.constexpr, o_k2):
    """x (TL, KL) of state lane k ^ M (lane ^ M: ``shfl.sync.bfly``). Interpreted: a gather."""
    if _PTX:
        return _bfly(x, M)
    else:
        return tl.gather(x, tl.broadcast_to(o_k2 ^ M, x.shape), axis=1)


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
    """Step t's B or C row of each time lane (p: ``p_B`` / ``p_C``) as a (TL, KL, SPT) block."""
    return tl.reshape(tl.load(p + t * NP), S3)


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
def _prefetch_tile_l1(Bt, Ct, row0, o_lane):
    """``prefetch.global.L1`` of a tile's B and C rows (64 steps x 16 states fp32 = 32 lines
    of 128 bytes each) from element ``row0``: one line of each per lane. A hint (no layout
    assumption: a different layout only prefetches a line twice); nothing interpreted."""
    if _PTX:
        for X in tl.static_range(2):
            p = (Bt if X == 0 else Ct) + row0 + o_lane * 32
            _prefetch_l1(p)


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
):
    tl.static_assert(NP == 16)
    TL: tl.constexpr = 8
    KL: tl.constexpr = 4
    SPT: tl.constexpr = NP // KL
    TPL: tl.constexpr = 2  # steps per state lane in the (TL, KL, TPL) tiles
    TPT: tl.constexpr = KL * TPL
    TILE: tl.constexpr = TL * TPT
    S3: tl.constexpr = (TL, KL, SPT)
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_i = tl.arange(0, TL)
    o_k = tl.arange(0, KL)
    o_n = tl.arange(0, NP)
    o_i3 = o_i[:, None, None]
    o_k2 = o_k[None, :]
    o_k3 = o_k[None, :, None]
    o_in = o_i[:, None] * 0 + o_n[None, :]  # (TL, NP): state n in every row
    o_t = o_i[:, None] * TPT + tl.arange(0, TPT)[None, :]  # (TL, TPT): step within the tile
    o_j = tl.reshape(o_t, (TL, KL, TPL))
    o_lane = o_i[:, None] * KL + o_k[None, :]  # (TL, KL)
    row0 = (o_i == 0)[:, None] & (o_n < NP)[None, :]  # (TL, NP): stores from one row

    b_A2 = tl.reshape(tl.load(A2 + i_d * NP + o_in), S3)
    if A_RAW:
        b_A2 = b_A2 * 1.4426950408889634
    b_D = tl.load(Dv + i_d) if HAS_D else 0.0
    b_bias = tl.load(delta_bias + i_d) if HAS_BIAS else 0.0
    ch = i_b * dim + i_d  # int64 channel index
    row = ch * L
    grp = i_d // (dim // G)
    bc = (i_b * G + grp) * LP * NP
    p_B = Bt + bc + (o_i[:, None] * TPT) * NP + o_in  # (TL, NP): + (t0 + j) * NP
    p_C = Ct + bc + (o_i[:, None] * TPT) * NP + o_in
    p_ck = ckpt + ch * (NCK * NP) + o_in
    if HAS_INIT:
        h = tl.reshape(tl.load(init + ch * NP + o_in), S3)
    else:
        h = tl.zeros(S3, dtype=tl.float32)
    nxt = _tlane_loads(u, delta, z, row, 0, L, o_t, TL, KL, TPL, HAS_Z)
    if BC_MODE == 2:
        nbc = _tlane_bc_rows(p_B, p_C, 0, NP, S3, TPT)
    for t0 in range(0, L, TILE):
        t0 = tl.multiple_of(t0, TILE)
        if t0 % CK == 0:
            tl.store(p_ck + (t0 // CK) * NP, tl.reshape(h, (TL, NP)), mask=row0)
        b_u, b_x, b_z = nxt
        nxt = _tlane_loads(u, delta, z, row, t0 + TILE, L, o_t, TL, KL, TPL, HAS_Z)
        if BC_MODE == 1:
            rBs, rCs = _tlane_bc_rows(p_B, p_C, t0, NP, S3, TPT)
        elif BC_MODE == 2:
            rBs, rCs = nbc
            nbc = _tlane_bc_rows(p_B, p_C, t0 + TILE, NP, S3, TPT)
        if PREFETCH_L1:
            _prefetch_tile_l1(Bt, Ct, bc + (t0 + TILE) * NP, o_lane)
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
                b_B = _tlane_row(p_B, t0 + j, NP, S3)
            else:
                b_B = rBs[j]
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
        # 2. inclusive scan of the maps over the time lanes (earlier lane first)
        for e in tl.static_range(3):
            Pp = _rows_up(P, 1 << e, o_i3)
            Qp = _rows_up(Q, 1 << e, o_i3)
            has = o_i3 >= (1 << e)
            Q = tl.where(has, P * Qp + Q, Q)
            P = tl.where(has, P * Pp, P)
        E = P * h + Q
        # 3. each time lane from the state before it, again through its steps
        g = tl.where(o_i3 == 0, h, _rows_up(E, 1, o_i3))
        h = _rows_last(E, o_k3)  # 4. the next tile's start
        ys = ()
        for j in tl.static_range(TPT):
            if BC_MODE == 0:
                b_C = _tlane_row(p_C, t0 + j, NP, S3)
            else:
                b_C = rCs[j]
            g = As[j] * g + Bs[j]
            ys = ys + (tl.sum(g * b_C, axis=2),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        # reduce-scatter over the state lanes: lane k keeps steps 2 k, 2 k + 1
        hi = ((o_k2 >> 1) & 1) == 1
        r = ()
        for m in tl.static_range(4):
            keep = tl.where(hi, ys[4 + m], ys[m])
            send = tl.where(hi, ys[m], ys[4 + m])
            r = r + (keep + _k_xor(send, 2, o_k2),)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
        odd = (o_k2 & 1) == 1
        # (mypy sees r as the empty tuple it starts as)
        y0 = tl.where(odd, r[2], r[0]) + _k_xor(tl.where(odd, r[0], r[2]), 1, o_k2)  # type: ignore[misc]
        y1 = tl.where(odd, r[3], r[1]) + _k_xor(tl.where(odd, r[1], r[3]), 1, o_k2)  # type: ignore[misc]
        b_y = tl.join(y0, y1)  # (TL, KL, TPL): step 8 i + 2 k + s
        if HAS_D:
            b_y += b_D * b_u
        if HAS_Z:
            b_zf = b_z.to(tl.float32)
            b_y *= b_zf * _sigmoid(b_zf)
        m = (t0 + o_t) < L
        tl.store(out + row + t0 + o_t, tl.reshape(b_y, (TL, TPT)).to(out.dtype.element_ty), mask=m)
    NC = NCK - 1
    tl.store(p_ck + NC * NP, tl.reshape(h, (TL, NP)), mask=row0)  # the final entry
    tl.store(last + ch * NP + o_in, tl.reshape(h, (TL, NP)), mask=row0)


def tile_steps(L: int) -> int:
    """LP of the time-lane kernel's B / C copies: whole tiles and one more (the next tile's
    loads and L1 prefetch), a multiple of 16."""
    return (cdiv(L, TILE) + 1) * TILE


_SHUFFLE = re.compile(
    r'tt\.elementwise_inline_asm "shfl\.sync\.(?:idx|up|bfly)[^"]*".*?'
    r": tensor<([\dx]+)xi32, (#ttg\.slice<\{[^}]*\}>|#\w+)>"
)


def tlane_layout_problem(ttgir: str) -> str | None:
    """What breaks the time-lane kernel's shuffles (Note [selective scan forward time lanes]) in
    its compiled TTGIR, or None when every shuffle operand has lane bits 0-1 on dimension 1
    (the state lane) and 2-4 on dimension 0 (the time lane), and nothing else of those two
    dimensions in registers or warps."""
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
        rest = b["register"] + b["warp"]
        if b["lane"] != want or any(v[0] or v[1] for v in rest):
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
