"""The walking SSD kernels (CUDA): one program per sequence, head and state tile walks the
chunks in turn with its state on chip: the chunk states (the forward's first launch, Note [SSD
Triton forward] in ``triton_fwd``, and the backward's) and their gradients.

The walks trade parallelism for traffic: the chunks of a sequence run in turn, so a launch has
only batch x heads x state tiles programs. The chunk-parallel alternative (each chunk's own
state, or its read-out gradient, in parallel, then a pass over the chunks in place) lost even at
one sequence of 48 heads, since its pass loops over every chunk too (``plan.py`` has the
timings). A walk's steps are independent but for the state update, so its loads overlap; the
registers bound the tiles (``tests/ops/ssd_scan/sm90_compile_check.py`` reports registers and
spills).

Note [SSD split walks]: a walk with few programs (one long sequence of few heads) is split into
``SEG`` parts of ``CPS`` chunks each (``walk_parts``), walked in parallel:

1. ``PART`` 1: each part walks its chunks from a zero state (the states' gradients: from a zero
   gradient at its end, backwards) and writes only where it ends, ``ends_s``, and its decay
   ``K_s``, the product of its chunks' decays (0 where a sequence starts inside it);
2. the pass (``_ssd_scan_parts_pass_kernel``, one program per head and block of a state's
   elements, so a launch of many programs): ``S <- K_s S + ends_s`` from the initial state (from
   ``dfinal``, the parts in reverse), writing the ``S`` entering each part over ``ends_s``;
3. ``PART`` 2: each part walks its chunks again from the state entering it, writing what the
   whole walk writes (the last part the final state, the first ``dinitial_states``).

Step 1 reads x and B (dout, z and C) once more than the whole walk and writes no state; the
states written in step 3 are the whole walk's, computed in the same order but for the sum that
enters each part. A part starts its segment ids from the step before it.

Note [SSD Triton walking backward]: the backward's chunk states and their gradients, each by one
walk at the backward's chunk (``plan.chunk``: its other kernels read them per chunk):

* ``_ssd_scan_states_walk_kernel`` writes the time steps, the log-decays ``cs`` within each
  chunk, the state entering each chunk and the final state, keeping S on chip: no chunk's own
  state is written, read and rewritten by a pass.
* ``_ssd_scan_dstates_walk_kernel`` walks backwards from ``dS = dfinal``: it writes
  ``dS_{c+1}`` for chunk c, the partial sums of ``dk_c = sum dS_{c+1} ∘ S_c`` (one a state
  tile), then ``dS <- k_c dS + sum_j w_j g_j C_jᵀ`` (``g = dout silu(z)``, ``w_j = exp(cs_j)``
  masked to the sequence entering the chunk), and ``dinitial_states = dS_0``, with no read-out
  gradient's round trip through memory.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv
from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.ssd_scan.plan import SSDPlan
from ssmscan.ops.ssd_scan.triton_fwd import (
    _cast,
    _dot,
    _last,
    _time_step,
    precision,
)


def dstates_blocks(headdim: int, dstate: int, plan: SSDPlan) -> int:
    """Programs per sequence and head of the dstates walk: its partial sums of ``dk``."""
    return cdiv(headdim, plan.walk_block_p) * cdiv(dstate, plan.walk_block_n)


# --- shared by the walks --------------------------------------------------------------------------


@triton.jit
def _state_tile(i_p, i_n, P, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """A program's (BLOCK_P, BLOCK_N) block (i_p, i_n) of a (headdim, dstate) state: (headdim
    indices, dstate indices, their masks, the block's mask, its offsets in a state)."""
    o_p = i_p * BLOCK_P + tl.arange(0, BLOCK_P)
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_p = o_p < P
    m_n = o_n < N
    return o_p, o_n, m_p, m_n, m_p[:, None] & m_n[None, :], o_p[:, None] * N + o_n[None, :]


@triton.jit
def _part_start(p_ends, p_given, o_pn, m_pn, GIVEN: tl.constexpr, PART: tl.constexpr,
                BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """A walk's starting state block in float32 (Note [SSD split walks]): PART 2 its entry of
    ``ends``, PART 1 zeros, the whole walk (PART 0) the given state (GIVEN) or zeros."""
    if PART == 2:
        b_S = tl.load(p_ends + o_pn, mask=m_pn, other=0.0)
    elif (PART == 1) or (not GIVEN):
        b_S = tl.zeros((BLOCK_P, BLOCK_N), dtype=tl.float32)
    else:
        b_S = tl.load(p_given + o_pn, mask=m_pn, other=0.0).to(tl.float32)
    return b_S


@triton.jit
def _chunk_decays(
    dt, dt_bias, a, seg, i_b, i_h, c, L, H, s_prev, dt_min, dt_max,
    SOFTPLUS: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_MIN: tl.constexpr,
    HAS_MAX: tl.constexpr, HAS_SEG: tl.constexpr, CHUNK: tl.constexpr, HAS_LO: tl.constexpr,
):  # fmt: skip
    """Chunk c's time steps (0 past L), ``cs = cumsum(dt A)`` (HAS_LO: summed in float64 and
    split in two float32 parts ``cs + lo``, Note [SSD two-float log-decays] in ``triton_bwd``),
    ``e_j = dt_j exp(sum_{k>j} dt_k A)`` masked to the chunk's last sequence, the chunk's decay
    ``exp(cs_last)`` (0 where a sequence starts inside it) and the last step's segment
    (``s_prev`` without segments)."""
    o_i = tl.arange(0, CHUNK)
    o_t = c * CHUNK + o_i
    p_dt = dt + (i_b * L + o_t) * H + i_h
    b_d = _time_step(p_dt, o_t < L, dt_bias + i_h, dt_min, dt_max, SOFTPLUS, HAS_BIAS, HAS_MIN,
                     HAS_MAX)  # fmt: skip
    m_next = (o_i < CHUNK - 1) & (o_t + 1 < L)
    b_dn = _time_step(p_dt + H, m_next, dt_bias + i_h, dt_min, dt_max, SOFTPLUS, HAS_BIAS,
                      HAS_MIN, HAS_MAX)  # fmt: skip
    if HAS_LO:
        b_cs64 = tl.cumsum((b_d * a).to(tl.float64), 0)
        b_cs = b_cs64.to(tl.float32)
        b_lo = (b_cs64 - b_cs.to(tl.float64)).to(tl.float32)
    else:
        b_cs = tl.cumsum(b_d * a, 0)
        b_lo = b_cs  # unused
    b_e = b_d * tl.exp(tl.cumsum(b_dn * a, 0, reverse=True))
    b_k = tl.exp(_last(b_cs, CHUNK))
    s_last = s_prev
    if HAS_SEG:
        b_s = tl.load(seg + i_b * L + tl.minimum(o_t, L - 1))
        s_last = tl.load(seg + i_b * L + tl.minimum(c * CHUNK + CHUNK - 1, L - 1))
        b_e = tl.where(b_s == s_last, b_e, 0.0)
        b_k = tl.where(s_last == s_prev, b_k, 0.0)
    return b_d, b_cs, b_lo, b_e, b_k, s_last


# --- the chunk states (the forward's and the backward's) and their gradients --------------------


@triton.jit
def _ssd_scan_states_walk_kernel(
    x,  # (batch, L, nheads, headdim)
    dt,  # (batch, L, nheads) raw time step
    dt_bias,  # (nheads,) (HAS_BIAS)
    A,  # (nheads,)
    B,  # (batch, L, ngroups, dstate)
    seg,  # (batch, L) int64 segment ids (HAS_SEG)
    init,  # (batch, nheads, headdim, dstate) initial state (HAS_INIT)
    dtp,  # (batch, nheads, NC * CHUNK) fp32 time step, 0 past L: output
    cs,  # (batch, nheads, NC * CHUNK) fp32 cumsum of dt * A within each chunk: output
    cslo,  # (batch, nheads, NC * CHUNK) fp32 low parts of cs, output (HAS_LO)
    states,  # (batch, NC, nheads, headdim, dstate) fp32 or x's dtype: the state entering each
    # chunk, output
    final,  # (batch, nheads, headdim, dstate) fp32 output
    ends,  # (batch, nheads, SEG, headdim, dstate) fp32: each part's end state from zero, output
    # (PART 1); the state entering each part, input (PART 2)
    kseg,  # (batch, nheads, SEG) fp32 each part's decay, output (PART 1)
    L,  # time steps
    H,  # nheads
    P,  # headdim
    G,  # ngroups
    N,  # dstate
    NC,  # chunks
    SEG,  # parts of the sequence (Note [SSD split walks]); 1 for PART 0
    CPS,  # chunks per part
    dt_min,  # clamp of the time step (HAS_MIN)
    dt_max,  # (HAS_MAX)
    SOFTPLUS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_MIN: tl.constexpr,
    HAS_MAX: tl.constexpr,
    HAS_SEG: tl.constexpr,
    HAS_INIT: tl.constexpr,
    HAS_LO: tl.constexpr,  # write cslo (the backward's walk)
    PART: tl.constexpr,  # 0 the whole walk; 1 the parts' ends from zero; 2 the parts from ends
    CHUNK: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    F32_DOT: tl.constexpr,  # matmul operands in float32 (at PRECISION); else x's dtype
    EMULATE: tl.constexpr,  # the interpreter: _dot emulates the tensor cores' rounding
):
    """Note [SSD Triton walking backward], the states; also the forward's first launch (Note
    [SSD Triton forward], 1). One program walks part ``program_id(0) % SEG`` of its sequence
    (Note [SSD split walks])."""
    i_bhs = tl.program_id(0).to(tl.int64)
    i_bh = i_bhs // SEG
    i_s = i_bhs % SEG
    i_p = tl.program_id(1)
    i_n = tl.program_id(2)
    i_b = i_bh // H
    i_h = i_bh % H
    i_g = i_h // (H // G)
    if F32_DOT:
        DOT = tl.float32
    else:
        DOT = x.dtype.element_ty
    o_i = tl.arange(0, CHUNK)
    o_p, o_n, m_p, m_n, m_pn, o_pn = _state_tile(i_p, i_n, P, N, BLOCK_P, BLOCK_N)
    b_S = _part_start(ends + i_bhs * P * N, init + i_bh * P * N, o_pn, m_pn, HAS_INIT, PART,
                      BLOCK_P, BLOCK_N)  # fmt: skip
    a = tl.load(A + i_h).to(tl.float32)
    c0 = i_s * CPS
    s_prev = tl.full((), 0, tl.int64)  # the initial state's segment
    if HAS_SEG:  # a part after the first: the segment of the step before it
        s_prev = tl.load(seg + i_b * L + tl.maximum(c0 * CHUNK - 1, 0), mask=c0 > 0, other=0)
    b_K = tl.full((), 1.0, tl.float32)
    for c in range(c0, tl.minimum(c0 + CPS, NC)):
        o_t = c * CHUNK + o_i
        m_t = o_t < L
        b_d, b_cs, b_lo, b_e, b_k, s_prev = _chunk_decays(
            dt, dt_bias, a, seg, i_b, i_h, c, L, H, s_prev, dt_min, dt_max, SOFTPLUS, HAS_BIAS,
            HAS_MIN, HAS_MAX, HAS_SEG, CHUNK, HAS_LO,
        )  # fmt: skip
        if PART == 1:
            b_K = b_K * b_k
        else:
            if (i_p == 0) & (i_n == 0):
                o_hq = i_bh * NC * CHUNK + c * CHUNK + o_i
                tl.store(dtp + o_hq, b_d)
                tl.store(cs + o_hq, b_cs)
                if HAS_LO:
                    tl.store(cslo + o_hq, b_lo)
            tl.store(states + ((i_b * NC + c) * H + i_h) * P * N + o_pn,
                     _cast(b_S, states.dtype.element_ty, EMULATE), mask=m_pn)  # fmt: skip
        o_x = ((i_b * L + o_t[None, :]) * H + i_h) * P + o_p[:, None]
        b_xe = tl.load(x + o_x, mask=m_p[:, None] & m_t[None, :], other=0.0).to(tl.float32)
        b_xe = _cast(b_xe * b_e[None, :], DOT, EMULATE)  # (BLOCK_P, CHUNK)
        o_u = ((i_b * L + o_t[:, None]) * G + i_g) * N + o_n[None, :]
        b_B = tl.load(B + o_u, mask=m_t[:, None] & m_n[None, :], other=0.0).to(DOT)
        b_S = b_k * b_S + _dot(b_xe, b_B, PRECISION, EMULATE)
    if PART == 1:
        tl.store(ends + i_bhs * P * N + o_pn, b_S, mask=m_pn)
        if (i_p == 0) & (i_n == 0):
            tl.store(kseg + i_bhs, b_K)
    elif i_s == SEG - 1:
        tl.store(final + i_bh * P * N + o_pn, b_S, mask=m_pn)


@triton.jit
def _ssd_scan_dstates_walk_kernel(
    dout,  # (batch, L, nheads, headdim)
    z,  # (batch, L, nheads, headdim) gate (HAS_Z)
    C,  # (batch, L, ngroups, dstate)
    seg,  # (batch, L) int64 segment ids (HAS_SEG)
    cs,  # (batch, nheads, NC * CHUNK) fp32 cumsum of dt * A within each chunk
    states,  # (batch, NC, nheads, headdim, dstate) fp32 or x's dtype: state entering each chunk
    dfinal,  # (batch, nheads, headdim, dstate) gradient of the final state (HAS_DFINAL)
    dinit,  # (batch, nheads, headdim, dstate) gradient of the initial state, output (HAS_INIT)
    dstates,  # (batch, NC, nheads, headdim, dstate) states' dtype, output: dS_{c+1} for chunk c
    dk,  # (batch, nheads, NC, NBLK) fp32 partial sums of dS_{c+1} ∘ S_c, output
    ends,  # (batch, nheads, SEG, headdim, dstate) fp32: the gradient at each part's start from
    # zero at its end, output (PART 1); the gradient at each part's end, input (PART 2)
    kseg,  # (batch, nheads, SEG) fp32 each part's decay, output (PART 1)
    L,  # time steps
    H,  # nheads
    P,  # headdim
    G,  # ngroups
    N,  # dstate
    NC,  # chunks
    NBLK,  # state tiles: headdim blocks (the grid's second axis) x dstate blocks (its third)
    SEG,  # parts of the sequence (Note [SSD split walks]); 1 for PART 0
    CPS,  # chunks per part
    HAS_Z: tl.constexpr,
    HAS_SEG: tl.constexpr,
    HAS_DFINAL: tl.constexpr,
    HAS_INIT: tl.constexpr,
    PART: tl.constexpr,  # 0 the whole walk; 1 the parts' starts from zero; 2 the parts from ends
    CHUNK: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr,
    F32_DOT: tl.constexpr,  # matmul operands in float32 (at PRECISION); else dout's dtype
    EMULATE: tl.constexpr,  # the interpreter: _dot emulates the tensor cores' rounding
):
    """Note [SSD Triton walking backward], the states' gradients. One program walks part
    ``program_id(0) % SEG`` of its sequence backwards (Note [SSD split walks])."""
    i_bhs = tl.program_id(0).to(tl.int64)
    i_bh = i_bhs // SEG
    i_s = i_bhs % SEG
    i_p = tl.program_id(1)
    i_n = tl.program_id(2)
    i_blk = i_p * tl.num_programs(2) + i_n
    i_b = i_bh // H
    i_h = i_bh % H
    i_g = i_h // (H // G)
    if F32_DOT:
        DOT = tl.float32
    else:
        DOT = dout.dtype.element_ty
    o_i = tl.arange(0, CHUNK)
    o_p, o_n, m_p, m_n, m_pn, o_pn = _state_tile(i_p, i_n, P, N, BLOCK_P, BLOCK_N)
    b_dS = _part_start(ends + i_bhs * P * N, dfinal + i_bh * P * N, o_pn, m_pn, HAS_DFINAL,
                       PART, BLOCK_P, BLOCK_N)  # fmt: skip
    c0 = i_s * CPS
    c1 = tl.minimum(c0 + CPS, NC)
    b_K = tl.full((), 1.0, tl.float32)
    for r in range(0, c1 - c0):
        c = c1 - 1 - r
        o_t = c * CHUNK + o_i
        m_t = o_t < L
        if PART != 1:
            o_st = ((i_b * NC + c) * H + i_h) * P * N + o_pn
            tl.store(dstates + o_st, _cast(b_dS, dstates.dtype.element_ty, EMULATE), mask=m_pn)
            b_S = tl.load(states + o_st, mask=m_pn, other=0.0).to(tl.float32)
            tl.store(dk + (i_bh * NC + c) * NBLK + i_blk, tl.sum(tl.sum(b_dS * b_S, 1), 0))
        b_cs = tl.load(cs + i_bh * NC * CHUNK + c * CHUNK + o_i)
        b_w = tl.exp(b_cs)
        b_k = tl.exp(_last(b_cs, CHUNK))
        if HAS_SEG:
            b_s = tl.load(seg + i_b * L + tl.minimum(o_t, L - 1))
            s_prev = tl.load(seg + i_b * L + tl.maximum(c * CHUNK - 1, 0), mask=c > 0, other=0)
            s_last = tl.load(seg + i_b * L + tl.minimum(c * CHUNK + CHUNK - 1, L - 1))
            b_w = tl.where(b_s == s_prev, b_w, 0.0)
            b_k = tl.where(s_last == s_prev, b_k, 0.0)
        b_K = b_K * b_k
        o_g = ((i_b * L + o_t[None, :]) * H + i_h) * P + o_p[:, None]
        m_g = m_p[:, None] & m_t[None, :]
        b_g = tl.load(dout + o_g, mask=m_g, other=0.0).to(tl.float32)  # (BLOCK_P, CHUNK)
        if HAS_Z:
            b_z = tl.load(z + o_g, mask=m_g, other=0.0).to(tl.float32)
            b_g = b_g * b_z * tl.sigmoid(b_z)
        o_u = ((i_b * L + o_t[:, None]) * G + i_g) * N + o_n[None, :]
        b_C = tl.load(C + o_u, mask=m_t[:, None] & m_n[None, :], other=0.0).to(DOT)
        b_dS = b_k * b_dS + _dot(_cast(b_g * b_w[None, :], DOT, EMULATE), b_C, PRECISION, EMULATE)
    if PART == 1:
        tl.store(ends + i_bhs * P * N + o_pn, b_dS, mask=m_pn)
        if (i_p == 0) & (i_n == 0):
            tl.store(kseg + i_bhs, b_K)
    elif HAS_INIT:
        if i_s == 0:
            tl.store(dinit + i_bh * P * N + o_pn, b_dS.to(dinit.dtype.element_ty), mask=m_pn)


@triton.jit
def _ssd_scan_parts_pass_kernel(
    ends,  # (batch, nheads, SEG, headdim, dstate) fp32: each part's own result, overwritten
    # in place by what enters each part
    kseg,  # (batch, nheads, SEG) fp32 each part's decay
    start,  # (batch, nheads, headdim, dstate): what enters the first part walked (HAS_START)
    SEG,  # parts
    PN,  # headdim x dstate
    HAS_START: tl.constexpr,
    REVERSE: tl.constexpr,  # walk the parts from the last (the states' gradients)
    BLOCK: tl.constexpr,
):
    """Note [SSD split walks], the pass over the parts: ``S <- k_s S + ends_s``, writing the
    ``S`` entering each part over ``ends_s``; one program per sequence, head and block of a
    state's elements."""
    i_bh = tl.program_id(0).to(tl.int64)
    o = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = o < PN
    if HAS_START:
        b_S = tl.load(start + i_bh * PN + o, mask=m, other=0.0).to(tl.float32)
    else:
        b_S = tl.zeros((BLOCK,), dtype=tl.float32)
    for r in range(0, SEG):
        if REVERSE:
            i_s = SEG - 1 - r
        else:
            i_s = r
        p = ends + (i_bh * SEG + i_s) * PN + o
        b_e = tl.load(p, mask=m, other=0.0)
        tl.store(p, b_S, mask=m)
        b_S = tl.load(kseg + i_bh * SEG + i_s) * b_S + b_e


def walk_parts(programs: object, chunks: object, plan: SSDPlan) -> tuple[int, int]:
    """(parts, chunks per part) of a walk of ``programs`` programs over ``chunks`` chunks (Note
    [SSD split walks]): one part unless the walk has fewer programs than
    ``plan.split_walk_programs``; then as many parts as bring it to that many, each of at least
    ``plan.split_walk_min_chunks`` chunks. Symbolic sizes (dynamic shapes) walk whole: the
    choice would guard on them."""
    target = plan.split_walk_programs
    if type(programs) is not int or type(chunks) is not int or programs >= target:
        return 1, chunks  # type: ignore[return-value]
    parts = min(cdiv(target, programs), chunks // plan.split_walk_min_chunks)
    if parts <= 1:
        return 1, chunks
    per = cdiv(chunks, parts)
    return cdiv(chunks, per), per


def _walk_in_parts(run, bh: int, parts: int, pn: int, start: torch.Tensor | None,
                   reverse: bool, plan: SSDPlan, device: torch.device) -> None:  # fmt: skip
    """``run(part, ends, kseg)`` launches a walk: whole (part 0) for one part; else the parts'
    ends, the pass over them and the parts (Note [SSD split walks]) on fresh ``ends`` / ``kseg``
    buffers; ``start`` enters the pass (the initial state, or ``dfinal`` in ``reverse``)."""
    if parts == 1:
        run(0, None, None)
        return
    ends = torch.empty((bh * parts * pn,), dtype=torch.float32, device=device)
    kseg = torch.empty((bh * parts,), dtype=torch.float32, device=device)
    run(1, ends, kseg)
    _pass_parts(ends, kseg, start, bh, parts, pn, reverse, plan)
    run(2, ends, kseg)


def _pass_parts(ends: torch.Tensor, kseg: torch.Tensor, start: torch.Tensor | None, bh: int,
                parts: int, pn: int, reverse: bool, plan: SSDPlan) -> None:  # fmt: skip
    """Launch the pass over the parts in place on ``ends``."""
    block = plan.split_pass_block
    launcher(_ssd_scan_parts_pass_kernel)[(bh, cdiv(pn, block))](
        ends, kseg, start, parts, pn, HAS_START=start is not None, REVERSE=reverse, BLOCK=block,
        num_warps=4,
    )  # fmt: skip


def launch_states(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    dt_bias: torch.Tensor | None,
    init: torch.Tensor | None,
    seg: torch.Tensor | None,
    final: torch.Tensor,
    dt_opts: dict,
    plan: SSDPlan,
    f32_dot: bool,
    forward: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The states walk: (dtp, cs, cs's low parts (the backward's; None for the forward), states
    entering each chunk) on contiguous operands; ``final`` written; at the states walk's tile
    (``plan.states_walk_*``). ``forward``: the forward's chunk
    (``plan.fwd_chunk``) and its states in x's dtype where the plan says so; else the
    backward's chunk and its states (float32, or x's dtype by ``plan.bwd_states_16``)."""
    batch, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    Q, sdtype = plan.chunk, torch.float32
    if not forward and plan.bwd_states_16:
        sdtype = x.dtype
    if forward:
        Q = plan.fwd_chunk
        sdtype = x.dtype if plan.fwd_states_16 else torch.float32
    bp, bn = plan.states_walk_block_p, plan.states_walk_block_n
    NC = cdiv(L, Q)
    f32, dev = torch.float32, x.device
    dtp = torch.empty((batch, H, NC * Q), dtype=f32, device=dev)
    cs = torch.empty((batch, H, NC * Q), dtype=f32, device=dev)
    cslo = None if forward else torch.empty_like(cs)
    # (batch, NC, H, P, N), allocated flat: NC is 1 for L <= Q, and a dimension that may be 1
    # makes the traced launch's view(-1) guard it against 1, splitting a dynamic-L export there
    states = torch.empty((batch * NC * H * P * N,), dtype=sdtype, device=dev)
    tiles = (cdiv(P, bp), cdiv(N, bn))
    parts, per = walk_parts(batch * H * tiles[0] * tiles[1], NC, plan)
    walk = launcher(_ssd_scan_states_walk_kernel)

    def run(part: int, ends: torch.Tensor | None, kseg: torch.Tensor | None) -> None:
        walk[(batch * H * parts, *tiles)](
            x, dt, dt_bias, A, B, seg, init, dtp, cs, cslo, states, final, ends, kseg,
            L, H, P, G, N, NC, parts, per, **dt_opts,
            HAS_SEG=seg is not None, HAS_INIT=init is not None, HAS_LO=cslo is not None,
            PART=part, CHUNK=Q, BLOCK_P=bp, BLOCK_N=bn,
            PRECISION=precision(plan, x.dtype), F32_DOT=f32_dot, EMULATE=plan.emulate,
            num_warps=plan.warps_states_walk, num_stages=plan.states_walk_stages,
        )  # fmt: skip

    _walk_in_parts(run, batch * H, parts, P * N, init, False, plan, dev)
    return dtp, cs, cslo, states


def launch_dstates(
    dout: torch.Tensor,
    z: torch.Tensor | None,
    C: torch.Tensor,
    seg: torch.Tensor | None,
    cs: torch.Tensor,
    states: torch.Tensor,
    dfinal: torch.Tensor | None,
    dinit: torch.Tensor | None,
    dk: torch.Tensor,
    plan: SSDPlan,
    f32_dot: bool,
) -> torch.Tensor:
    """The gradients ``dS_{c+1}`` of each chunk's own state (walking backwards), written with
    ``dk``'s partial sums (batch, nheads, chunks, ``dstates_blocks``) and ``dinit``."""
    batch, L, H, P = dout.shape
    G, N = C.shape[2], C.shape[3]
    NC = cdiv(L, plan.chunk)
    dstates = torch.empty_like(states)
    nblk = dstates_blocks(P, N, plan)
    tiles = (cdiv(P, plan.walk_block_p), cdiv(N, plan.walk_block_n))
    parts, per = walk_parts(batch * H * nblk, NC, plan)
    walk = launcher(_ssd_scan_dstates_walk_kernel)

    def run(part: int, ends: torch.Tensor | None, kseg: torch.Tensor | None) -> None:
        walk[(batch * H * parts, *tiles)](
            dout, z, C, seg, cs, states, dfinal, dinit, dstates, dk, ends, kseg,
            L, H, P, G, N, NC, nblk, parts, per,
            HAS_Z=z is not None, HAS_SEG=seg is not None, HAS_DFINAL=dfinal is not None,
            HAS_INIT=dinit is not None, PART=part, CHUNK=plan.chunk,
            BLOCK_P=plan.walk_block_p, BLOCK_N=plan.walk_block_n,
            PRECISION=precision(plan, dout.dtype), F32_DOT=f32_dot, EMULATE=plan.emulate,
            num_warps=plan.warps_walk, num_stages=plan.walk_stages,
        )  # fmt: skip

    _walk_in_parts(run, batch * H, parts, P * N, dfinal, True, plan, dout.device)
    return dstates
