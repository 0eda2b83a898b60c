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

Instruction order matters more than instruction count here (H200, ms at (8, 4096, 2048, 16)
fp32 / bf16 and (16, 1536, 1024, 16) fp32 / bf16): loading C_t next to B_t before the update,
instead of after it, took the
kernel from 1.34 / 1.21 / 0.66 / 0.62 to 1.04 / 0.87 / 0.45 / 0.39 (48 -> 62 registers, same
instructions); loading every B_t / C_t of the tile, and z, before the first update took it to
0.86 / 0.80 / 0.38 / 0.36 (124 registers: 16 warps per multiprocessor instead of 32, but the
loads of a tile in flight together). Other one-line changes (the final store unconditional, 1-D
program ids) moved the time by 10-30% either way: check ``n_regs`` and time on the device after
touching the loop.
"""

from __future__ import annotations

import warnings

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv
from ssmscan.ops.common.launch_options import DEFAULT as DEFAULT_LAUNCH
from ssmscan.ops.common.launch_options import LaunchOptions
from ssmscan.ops.common.launch_plan import planned
from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.selective_scan import shapes
from ssmscan.ops.selective_scan.layout_check import LaneLayoutError, check_lane_layout
from ssmscan.ops.selective_scan.plan import (
    DEFAULT,
    DeviceFacts,
    ForwardPlan,
    Policy,
    device_facts,
    lane_geometry,
    plan_forward,
)
from ssmscan.ops.selective_scan.shapes import empty_forward_outputs
from ssmscan.ops.selective_scan.triton_common import (
    _sigmoid,
    _softplus,
    as_f32,
    num_groups,
    prep_A,
    prep_BC,
    prep_BC_lane,
)
from ssmscan.ops.selective_scan.triton_fwd_lane import _selective_scan_fwd_lane_kernel
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
    PTX: tl.constexpr,
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
            b_y *= b_z * _sigmoid(b_z, PTX)
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
    PTX: tl.constexpr,  # inline PTX (``rcp``); else portable ``tl`` code
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
            PTX,
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


def _kernel(name: str, KL: int, ptx: bool, options: LaunchOptions):
    """The launcher of a plan's kernel ``name`` (the lane kernels with their layout check where
    they use PTX shuffles: their portable code assumes no layout)."""
    check = check_lane_layout(KL, True) if ptx else None
    if name == "fwd_lane":
        return launcher(_selective_scan_fwd_lane_kernel, check, options)
    if name == "fwd_lane2":
        return launcher(_selective_scan_fwd_lane2_kernel, check, options)
    if name == "fwd_tile":
        return launcher(_selective_scan_fwd_kernel, None, options)
    return launcher(_selective_scan_fwd_carry_kernel, None, options)


def plan_for(
    u: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    policy: Policy = DEFAULT,
    facts: DeviceFacts | None = None,
) -> ForwardPlan:
    """The planner's plan for these inputs on their device (or on ``facts``'s)."""
    batch, dim, L = u.shape
    # N and G pick constexprs: int() specializes them when the sizes are symbolic
    # (torch.compile(dynamic=True)); next_power_of_2 on a SymInt is a bitwise expression sympy
    # cannot cope with
    N, G = int(A.shape[1]), int(num_groups(B))
    a_plain = A.dtype == torch.float32 and A.is_contiguous()
    return plan_forward(batch, dim, L, N, G, u.dtype, (B.dtype, C.dtype), a_plain,
                        facts or device_facts(u.device), policy, shapes.CHECKPOINT_LEN)  # fmt: skip


@planned
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
    *,
    options: LaunchOptions = DEFAULT_LAUNCH,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, last_state, checkpoints), fresh (``shapes.empty_forward_outputs``), from the
    kernels; in eager through recorded launches (Note [eager launch plans]) unless ``options``
    says otherwise."""
    outs = empty_forward_outputs(u, A)
    launch(u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus, *outs,
           options=options)  # fmt: skip
    return outs


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
    plan: ForwardPlan | None = None,
    options: LaunchOptions = DEFAULT_LAUNCH,
) -> None:
    """Run the forward into the preallocated ``out``, ``last_state``, ``checkpoints``
    (``shapes.empty_forward_outputs``) by ``plan`` (the planner's if None), launched as
    ``options`` says (``LaunchOptions``). Inputs may have any strides. A lane kernel that fails its layout check is replaced by the plan's fallback (the
    check runs before its first launch: nothing was written)."""
    if u.dtype == torch.float64:
        _launch_host(u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus, out,
                     last_state, checkpoints)  # fmt: skip
        return
    if u.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(
            f"ssmscan selective_scan Triton kernels take float32/16, bfloat16 or float64 u; got {u.dtype}"
        )
    plan = plan if plan is not None else plan_for(u, A, B, C)
    args = (u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus)
    try:
        _launch(*args, out, last_state, checkpoints, plan, options)
    except LaneLayoutError as e:
        if plan.fallback is None:
            raise
        warnings.warn(f"{e}; this call runs the 2-D forward kernel", stacklevel=2)
        _launch(*args, out, last_state, checkpoints, plan.fallback, options)


def _launch_host(*args: object) -> None:
    """float64: no Triton path; the float64 C kernel on host copies (correct, not fast)."""
    from ssmscan.ops.selective_scan import cpu  # noqa: F401  (registers the op)

    *ins, softplus, out, last_state, checkpoints = args
    host = [t.cpu() if isinstance(t, torch.Tensor) else None for t in ins]
    res = torch.ops.ssmscan.selective_scan_fwd_cpu(*host, softplus)
    for dst, src in zip((out, last_state, checkpoints), res):
        assert isinstance(dst, torch.Tensor)  # (the outputs: ``launch``'s tensors)
        dst.copy_(src)


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
    plan: ForwardPlan,
    options: LaunchOptions,
) -> None:
    batch, dim, L = u.shape
    N = int(A.shape[1])
    NP, lane = plan.NP, plan.kernel == "lane"
    NCK = checkpoints.shape[2]
    assert plan.CK % plan.TT == 0 and NCK == cdiv(L, plan.CK) + 1, (NCK, L)
    assert out.shape == (batch, dim, L) and last_state.shape == (batch, dim, N)
    KL = lane_geometry(NP)[0]
    f32, dev = torch.float32, u.device
    # state-contiguous buffers (Note [selective scan forward layout]): the checkpoints go straight
    # into ``checkpoints`` (fresh, contiguous fp32 (batch, dim, NCK, N): ``shapes``) unless N was
    # padded
    direct = plan.direct
    ckt = checkpoints if direct else torch.empty((batch, dim, NCK, NP), dtype=f32, device=dev)
    init_t = None
    if initial_state is not None:
        init_t = torch.zeros((batch, dim, NP), dtype=f32, device=dev)
        init_t[:, :, :N].copy_(initial_state)
    if lane:  # both copies in one launch; bf16 pairs as int32 words (the kernels' BC16 = 1)
        Bt, Ct = prep_BC_lane(B, C, batch, NP, plan.LP, plan.bc16 or f32, options)
        if plan.bc16 == torch.bfloat16:
            Bt, Ct = Bt.view(torch.int32), Ct.view(torch.int32)
    else:
        Bt, Ct = prep_BC(B, batch, NP), prep_BC(C, batch, NP)
    args: dict[str, torch.Tensor | int | None] = dict(
        u=u.contiguous(),
        delta=delta.contiguous(),
        A2=A if plan.a_raw else prep_A(A, NP),
        Bt=Bt,
        Ct=Ct,
        Dv=as_f32(D) if D is not None else None,
        z=z.contiguous() if z is not None else None,
        delta_bias=as_f32(delta_bias) if delta_bias is not None else None,
        init=init_t,
        out=out,
        ckpt=ckt,
    )
    if lane:
        args["LP"] = plan.LP
    flags = dict(
        SOFTPLUS=delta_softplus,
        HAS_D=D is not None,
        HAS_Z=z is not None,
        HAS_BIAS=delta_bias is not None,
        HAS_INIT=initial_state is not None,
    )
    sizes = dict(dim=dim, L=L, N=N, G=int(num_groups(B)), NCK=NCK)
    last: dict[str, torch.Tensor | None] = {"last": None} if lane else {}
    # what the real pass reads of the local pass: the lane kernel carries the segment states
    # itself (one launch fewer), the 2-D one reads the carry pass's checkpoints
    carried: dict[str, torch.Tensor | None] = {"seg_state": None, "seg_dt": None}
    if plan.local is not None:  # Note [selective scan segments]: local, carry, then real pass
        seg_state = torch.empty((batch, plan.records, dim, NP), dtype=f32, device=dev)
        seg_dt = torch.empty((batch, plan.records, dim), dtype=f32, device=dev)
        loc = plan.local
        _kernel(loc.kernel, KL, plan.ptx, options)[loc.grid](
            **args, seg_state=seg_state, seg_dt=seg_dt, **last, **sizes, **loc.args(), **flags,
            **loc.kw(),
        )  # fmt: skip
        if lane:
            carried = {"seg_state": seg_state, "seg_dt": seg_dt}
        else:
            assert plan.carry is not None  # the 2-D kernel's segments have a carry pass
            _kernel(plan.carry.kernel, KL, plan.ptx, options)[plan.carry.grid](
                args["A2"], init_t, seg_state, seg_dt, ckt, dim, NCK, **plan.carry.args(),
                HAS_INIT=initial_state is not None, **plan.carry.kw(),
            )  # fmt: skip
    if lane:
        last["last"] = last_state if direct else None
    real = plan.real
    _kernel(real.kernel, KL, plan.ptx, options)[real.grid](
        **args, **carried, **last, **sizes, **real.args(), **flags, **real.kw()
    )
    if not direct:
        checkpoints.copy_(ckt[..., :N])
    if not (lane and direct):  # the lane kernel wrote it
        last_state.copy_(checkpoints[:, :, -1])
