"""Triton forward kernel of ``ssmscan::selective_scan_fwd`` (CUDA).

Layout and data preparation: Note [selective scan thread layout] in ``triton_common``.
Each program owns (batch b, BLOCK_D channels, all states, one segment of L) and walks its segment
sequentially in registers: one exp2 per (d, n, t), no cross-thread traffic; with several segments
a local pass and a carry pass come first (Note [selective scan segments]). The state before every
CHECKPOINT_LEN-step chunk, and the final state as the last entry, are written to ``checkpoints``
(``shapes``) so that the backward can recompute states chunk by chunk.

Note [selective scan forward tiles]
-----------------------------------
What Triton makes of the layout decides the speed (read with
``benchmarks/selective_scan/sass_report.py``, sm_90). The loop-carried state (BLOCK_D, NP) takes the
layout of the state-shaped loads / stores (A2t, checkpoints). When Triton can prove their channel
offsets 16-aligned it vectorizes them along the channels: 4 channels per thread and the states
spread over threads *and warps*, so every step's ``y = sum_n C h`` and every column of u / delta / z
went through shared memory (9 BAR + 9 STS / LDS + 6 SHFL per step at (8, 4096, 2048), BLOCK_D 64).
Offsetting them by ``max(dim, 1)`` hides the alignment: one channel per thread with all NP states,
each warp access still 128 contiguous bytes. Then:

* the (NP,) B_t / C_t loads have fewer elements than the program has threads, so Triton loads them
  directly in the state's layout (all NP per thread, contiguous: LDG.128, L1 broadcast);
* ``FWD_VARIANT = "tile"`` reads u / delta / z as (BLOCK_D, TT) tiles, each thread one row of TT
  contiguous steps as one 16-byte vector (TT = 4 in fp32, 8 in 16-bit), applies bias / softplus /
  D / gate to the whole tile, takes column j in registers (``_col``) and writes ``out`` as one tile.
  A row wider than 16 bytes (fp32 with TT = 8) is split over two threads: shuffles and shared
  memory again, so TT follows the dtype. Steps past ``t_end`` are masked (any L); the mask and the
  vector width only come together when L is a multiple of 16 (Triton's specialization).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.selective_scan.shapes import CHECKPOINT_LEN, num_checkpoints
from ssmscan.ops.selective_scan.triton_common import (
    TILE_T,
    _sigmoid,
    _softplus,
    block_channels,
    num_groups,
    pad_states,
    prep_A_t,
    prep_BC,
    segments,
)


@triton.jit
def _fwd_step(
    h,
    b_A2,
    u,
    delta,
    z,
    b_bias,
    b_D,
    p_B,
    p_C,
    row,
    m_d,
    t,
    t_end,
    SOFTPLUS: tl.constexpr,
    NP: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    LOCAL: tl.constexpr,
):
    """One time step t for the program's channels: h_t, and (unless LOCAL) y_t stored to ``out``
    by the caller. Returns (h, dt_t, u_t, y_t)."""
    m = m_d & (t < t_end)
    b_u = tl.load(u + row + t, mask=m, other=0.0).to(tl.float32)
    b_dt = tl.load(delta + row + t, mask=m, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b_dt += b_bias
    if SOFTPLUS:
        b_dt = _softplus(b_dt)
    b_dt = tl.where(m, b_dt, 0.0)  # padded steps: decay 1, input 0
    b_B = tl.load(p_B + t * NP, mask=t < t_end, other=0.0)
    h = tl.exp2(b_dt[:, None] * b_A2) * h + (b_dt * b_u)[:, None] * b_B[None, :]
    if LOCAL:
        b_y = b_u
    else:
        b_C = tl.load(p_C + t * NP, mask=t < t_end, other=0.0)
        b_y = tl.sum(h * b_C[None, :], axis=1)
        if HAS_D:
            b_y += b_D * b_u
        if HAS_Z:
            b_z = tl.load(z + row + t, mask=m, other=0.0).to(tl.float32)
            b_y *= b_z * _sigmoid(b_z)
    return h, b_dt, b_y


@triton.jit
def _col(x, o_t, j: tl.constexpr):
    """Column j of a (BLOCK_D, TT) tile whose rows live in one thread each: a select and an
    in-thread sum (the -0.0 fill makes the adds fold away, ``x + -0.0 == x``)."""
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
    """TT time steps t0 .. t0 + TT - 1 (Note [selective scan forward tiles]); stores y unless LOCAL.
    Returns (h, dt_sum)."""
    o_tt = t0 + o_t  # (TT,)
    m_t = o_tt < t_end
    m = m_d[:, None] & m_t[None, :]
    p = row[:, None] + o_tt[None, :]  # (BLOCK_D, TT): TT contiguous steps per thread
    b_u = tl.load(u + p, mask=m, other=0.0).to(tl.float32)
    b_dt = tl.load(delta + p, mask=m, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b_dt += b_bias[:, None]
    if SOFTPLUS:
        b_dt = _softplus(b_dt)
    b_dt = tl.where(m, b_dt, 0.0)  # padded steps: decay 1, input 0
    b_du = b_dt * b_u
    b_y = tl.zeros_like(b_u)
    for j in tl.static_range(TT):
        m_j = t0 + j < t_end
        # (NP,) B_t / C_t: fewer elements than threads, so Triton loads them in the states' layout
        # (every thread all NP, contiguous: vector loads served by L1) instead of via shared memory
        b_B = tl.load(p_B + (t0 + j) * NP, mask=m_j, other=0.0)
        b_dtj = _col(b_dt, o_t, j)
        h = tl.exp2(b_dtj[:, None] * b_A2) * h + _col(b_du, o_t, j)[:, None] * b_B[None, :]
        if LOCAL:
            dt_sum += b_dtj
        else:
            b_C = tl.load(p_C + (t0 + j) * NP, mask=m_j, other=0.0)
            b_yj = tl.sum(h * b_C[None, :], axis=1)
            b_y = tl.where(o_t[None, :] == j, b_yj[:, None], b_y)
    if not LOCAL:
        if HAS_D:
            b_y += b_D[:, None] * b_u
        if HAS_Z:
            b_z = tl.load(z + p, mask=m, other=0.0).to(tl.float32)
            b_y *= b_z * _sigmoid(b_z)
        tl.store(out + p, b_y.to(out.dtype.element_ty), mask=m)
    return h, dt_sum


@triton.jit
def _selective_scan_fwd_kernel(
    u,  # (batch, dim, L) input
    delta,  # (batch, dim, L) time step before bias / softplus
    A2t,  # (NP, dim) fp32, A * log2(e) transposed, zero-padded states
    Bt,  # (batch, G, L, NP) fp32, B time-major
    Ct,  # (batch, G, L, NP) fp32, C time-major
    Dv,  # (dim,) fp32 skip weight, or None
    z,  # (batch, dim, L) gate, or None
    delta_bias,  # (dim,) fp32, or None
    init,  # (batch, NP, dim) fp32 initial state (states-major, padded), or None
    out,  # (batch, dim, L) output, u's dtype
    ckpt,  # (batch, NCK, NP, dim) fp32: state before each chunk, last entry the final state
    seg_state,  # (batch, NSEG, NP, dim) fp32 LOCAL: segment end state from zero, or None
    seg_dt,  # (batch, NSEG, dim) fp32 LOCAL: sum of dt over the segment, or None
    dim,  # channels
    L,  # sequence length
    N,  # states
    G,  # groups of B / C
    NCK,  # checkpoint entries = cdiv(L, CK) + 1
    SEG,  # chunks per segment (program axis 2)
    SOFTPLUS: tl.constexpr,  # dt = softplus(delta + bias)
    NP: tl.constexpr,  # padded states, power of two
    CK: tl.constexpr,  # checkpoint chunk length, multiple of 4
    BLOCK_D: tl.constexpr,  # channels per program
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    LOCAL: tl.constexpr,  # pass 1 of Note [selective scan segments]: from zero, no outputs
    TT: tl.constexpr,  # steps per loop iteration, divides CK
    TILED: tl.constexpr,  # (BLOCK_D, TT) tile loads / stores (else one column per step)
):
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    i_s = tl.program_id(2)
    NSEG = tl.num_programs(2)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NP)
    # (BLOCK_D, NP) offsets in the (NP, dim) layout of A2t, the states and checkpoints: contiguous
    # along the channels, which makes Triton give each thread one channel with all its states (a
    # (dim, N) layout would spread the states of a channel over threads: shuffles for y)
    # (max hides dim's divisibility by 16: Triton then does not vectorize these accesses along
    # the channels, which would put 4 channels in a thread and spread the states over threads
    # and warps, Note [selective scan forward tiles]; each warp access is still 128 contiguous bytes)
    o_nd = o_n[None, :] * tl.maximum(dim, 1) + o_d[:, None]

    b_A2 = tl.load(A2t + o_nd, mask=m_d[:, None], other=0.0)
    b_D = tl.load(Dv + o_d, mask=m_d, other=0.0) if HAS_D else None
    b_bias = tl.load(delta_bias + o_d, mask=m_d, other=0.0) if HAS_BIAS else None

    row = (i_b * dim + o_d.to(tl.int64)) * L  # (BLOCK_D,) int64 offsets of the rows
    grp = (i_d * BLOCK_D) // (dim // G)  # a block never straddles two groups
    bc = (i_b * G + grp) * L * NP  # B_t / C_t of this program's group: broadcast loads
    p_B = Bt + bc + o_n  # (NP,)
    p_C = Ct + bc + o_n
    p_ck = ckpt + i_b * NCK * NP * dim + o_nd  # entry c at p_ck + c * NP * dim

    NC = NCK - 1  # chunks
    c0 = i_s * SEG
    c1 = tl.minimum(c0 + SEG, NC)
    t_beg = c0 * CK
    t_end = tl.minimum(c1 * CK, L)
    dt_sum = tl.zeros((BLOCK_D,), dtype=tl.float32)  # LOCAL only
    if LOCAL:
        h = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    elif i_s == 0:
        if HAS_INIT:
            h = tl.load(init + i_b * NP * dim + o_nd, mask=m_d[:, None], other=0.0)
        else:
            h = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    else:
        h = tl.load(p_ck + c0 * (NP * dim), mask=m_d[:, None], other=0.0)  # from the carry pass
    o_t = tl.arange(0, TT)
    for t0 in range(t_beg, t_end, TT):
        t0 = tl.multiple_of(t0, TT)
        if not LOCAL:
            if t0 % CK == 0:
                tl.store(p_ck + (t0 // CK) * (NP * dim), h, mask=m_d[:, None])
        if TILED:
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
        else:
            for j in tl.static_range(TT):  # unrolled: TT steps' loads and exp2 in flight
                h, b_dt, b_y = _fwd_step(
                    h,
                    b_A2,
                    u,
                    delta,
                    z,
                    b_bias,
                    b_D,
                    p_B,
                    p_C,
                    row,
                    m_d,
                    t0 + j,
                    t_end,
                    SOFTPLUS,
                    NP,
                    HAS_D,
                    HAS_Z,
                    HAS_BIAS,
                    LOCAL,
                )
                if LOCAL:
                    dt_sum += b_dt
                else:
                    tl.store(
                        out + row + t0 + j,
                        b_y.to(out.dtype.element_ty),
                        mask=m_d & (t0 + j < t_end),
                    )
    if LOCAL:
        tl.store(seg_state + (i_b * NSEG + i_s) * (NP * dim) + o_nd, h, mask=m_d[:, None])
        tl.store(seg_dt + (i_b * NSEG + i_s) * dim + o_d, dt_sum, mask=m_d)
    elif c1 == NC:
        tl.store(p_ck + NC * (NP * dim), h, mask=m_d[:, None])  # the final entry


@triton.jit
def _selective_scan_fwd_carry_kernel(
    A2t,  # (NP, dim) fp32
    init,  # (batch, NP, dim) fp32 initial state, or None
    seg_state,  # (batch, NSEG, NP, dim) fp32 segment end states from zero
    seg_dt,  # (batch, NSEG, dim) fp32 sum of dt per segment
    ckpt,  # (batch, NCK, NP, dim) fp32: writes the entries at segment starts
    dim,  # channels
    NCK,  # checkpoint entries
    NSEG,  # segments
    SEG,  # chunks per segment
    NP: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_INIT: tl.constexpr,
):
    """Pass 2 of Note [selective scan segments]: h_{s+1} = exp(A * sum dt_s) h_s + local_s."""
    i_d = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    o_d = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m_d = o_d < dim
    o_n = tl.arange(0, NP)
    o_nd = o_n[None, :] * dim + o_d[:, None]
    b_A2 = tl.load(A2t + o_nd, mask=m_d[:, None], other=0.0)
    p_ck = ckpt + i_b * NCK * NP * dim + o_nd
    if HAS_INIT:
        h = tl.load(init + i_b * NP * dim + o_nd, mask=m_d[:, None], other=0.0)
    else:
        h = tl.zeros((BLOCK_D, NP), dtype=tl.float32)
    for s in range(0, NSEG - 1):
        b_loc = tl.load(
            seg_state + (i_b * NSEG + s) * (NP * dim) + o_nd, mask=m_d[:, None], other=0.0
        )
        b_sdt = tl.load(seg_dt + (i_b * NSEG + s) * dim + o_d, mask=m_d, other=0.0)
        h = tl.exp2(b_sdt[:, None] * b_A2) * h + b_loc
        tl.store(p_ck + ((s + 1) * SEG) * (NP * dim), h, mask=m_d[:, None])


# Which main-loop variant ``launch`` uses (Note [selective scan forward tiles]); a module
# constant so the benchmark can time them side by side: "column" is the previous kernel (one
# (BLOCK_D,) column of u / delta / z / out and one (NP,) B_t / C_t per step), "tile4" / "tile8"
# read and write (BLOCK_D, TT) tiles, TT contiguous steps per thread, and (TT, NP) B / C blocks.
FWD_VARIANTS = {"column": (4, False), "tile": (0, True), "tile4": (4, True), "tile8": (8, True)}
FWD_VARIANT = "tile"


def variant_constexprs(itemsize: int) -> dict[str, int | bool]:
    """TT / TILED of ``FWD_VARIANT`` for ``_selective_scan_fwd_kernel`` and inputs of ``itemsize``
    bytes ("tile": TT steps = one 16-byte vector per row, 4 in fp32, 8 in 16-bit)."""
    tt, tiled = FWD_VARIANTS[FWD_VARIANT]
    tt = tt or 16 // itemsize
    assert CHECKPOINT_LEN % tt == 0, (CHECKPOINT_LEN, tt)
    return dict(TT=tt, TILED=tiled)


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
    N = A.shape[1]
    NP = pad_states(N)
    G = num_groups(B)
    NCK = checkpoints.shape[2]
    assert CHECKPOINT_LEN % TILE_T == 0 and NCK == num_checkpoints(L), (NCK, L)
    assert out.shape == (batch, dim, L) and last_state.shape == (batch, dim, N)
    block_d, warps = block_channels(batch, dim, G)
    nblk = triton.cdiv(dim, block_d)
    nseg, seg = segments(batch * nblk * warps, NCK - 1)
    f32 = torch.float32
    dev = u.device
    # the kernels keep states channel-contiguous, (NP, dim): checkpoints go through ckt
    # (batch, NCK, NP, dim) and are transposed into ``checkpoints`` / ``last_state`` at the end
    ckt = torch.empty((batch, NCK, NP, dim), dtype=f32, device=dev)
    init_t = None
    if initial_state is not None:
        init_t = torch.zeros((batch, NP, dim), dtype=f32, device=dev)
        init_t[:, :N].copy_(initial_state.transpose(1, 2))
    args = dict(
        u=u.contiguous(),
        delta=delta.contiguous(),
        A2t=prep_A_t(A, NP),
        Bt=prep_BC(B, batch, NP),
        Ct=prep_BC(C, batch, NP),
        Dv=D.to(f32).contiguous() if D is not None else None,
        z=z.contiguous() if z is not None else None,
        delta_bias=delta_bias.to(f32).contiguous() if delta_bias is not None else None,
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
        num_warps=warps,
    )
    consts.update(variant_constexprs(u.element_size()))
    kernel = launcher(_selective_scan_fwd_kernel)
    if nseg > 1:
        # Note [selective scan segments]: local pass, carry pass, then the real pass below
        seg_state = torch.empty((batch, nseg, NP, dim), dtype=f32, device=dev)
        seg_dt = torch.empty((batch, nseg, dim), dtype=f32, device=dev)
        kernel[(nblk, batch, nseg)](
            **args,
            seg_state=seg_state,
            seg_dt=seg_dt,
            dim=dim,
            L=L,
            N=N,
            G=G,
            NCK=NCK,
            SEG=seg,
            LOCAL=True,
            **consts,
        )
        launcher(_selective_scan_fwd_carry_kernel)[(nblk, batch)](
            args["A2t"],
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
    kernel[(nblk, batch, nseg)](
        **args,
        seg_state=None,
        seg_dt=None,
        dim=dim,
        L=L,
        N=N,
        G=G,
        NCK=NCK,
        SEG=seg,
        LOCAL=False,
        **consts,
    )
    checkpoints.copy_(ckt[:, :, :N].permute(0, 3, 1, 2))
    last_state.copy_(ckt[:, -1, :N].transpose(1, 2))
