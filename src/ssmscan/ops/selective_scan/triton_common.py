"""Pieces shared by the Triton selective-scan kernels (forward and backward).

Note [selective scan thread layout]
-----------------------------------
Every program owns one batch row ``b``, a block of ``BLOCK_D`` channels with *all* N states of each
channel, and one segment of L, and walks time sequentially: the recurrence of each (d, n) lane is
independent, so no cross-thread scan is needed. The state is a (BLOCK_D, NP) register tile.

The backward lays every state-shaped buffer (A, checkpointed states, scratch) out
channel-contiguous, (NP, dim): Triton's coalescing then puts the threads along the channels, one
channel with all its states per thread, so ``y = sum_n C h``, ``du`` and ``ddelta`` are in-thread
sums. The state offsets use ``max(dim, 1)`` instead of ``dim``: that hides dim's divisibility by 16,
without which Triton vectorizes the state accesses along the channels, putting 4 channels in a
thread and the states over threads *and warps* (shared memory and barriers every step). The
forward instead spreads a channel's states over NP / 4 threads of one warp, state-contiguous
(dim, NP) buffers, for 4x the warps (Note [selective scan forward layout] in ``triton_fwd``), and
so do the "split" and "lane" backward kernels (Note [selective scan backward split] in
``triton_bwd_split``, Note [selective scan backward lanes] in ``triton_bwd_lane``).
The launchers prepare, once per call:

* ``A2`` (dim, NP) fp32 (forward, split backward) and its transpose ``A2t`` (NP, dim) (the
  tile backward kernels): ``A * log2(e)``,
  zero-padded to NP states (a padded state has decay 1 and input 0, so it stays 0); the lane
  forward scales a contiguous fp32 A (dim, N = NP) itself for 16-bit inputs;
* ``Bt``, ``Ct`` (batch, G, L, NP) fp32: B and C transposed time-major and padded (these are
  ``dim / N`` times smaller than u, so the copy is cheap); B_t / C_t are broadcast loads. The
  lane kernels (forward, the lane backward's kernels) take them time-padded too, (batch, G, LP,
  NP) (``triton_fwd_lane.padded_steps``), both made by one Triton launch (``prep_BC_lane``);
* copies of the checkpoints / initial state / dlast_state in the kernel's layout, transposed back
  at the end where it differs from the op's.

The backward walks time in unrolled groups of ``TILE_T = 4`` steps, the forward in 8-step tiles.

Note [selective scan segments]
------------------------------
One program per (batch, channel block) gives only batch x dim threads, too few to hide the exp2 and
load latencies at small batch. So L is also split into NSEG segments of SEG checkpoint chunks, one
program each (program axis 2), when batch x dim alone is short of the planner's target warps
(``plan.segments``):

1. local pass: each segment runs from a zero state, giving its end state S_s and sum_t dt_t;
2. carry pass (one program per channel block, NSEG steps): h_{s+1} = exp(A sum dt_s) h_s + S_s,
   written to the checkpoint entry at the start of segment s + 1 (the recurrence is affine, so the
   end state of a segment is its decayed start state plus its end state from zero);
3. the real pass: each segment runs again from its carried start state, writing ``out`` and the
   checkpoints inside it; the last segment writes the final entry and ``last_state``.

The lane forward (``triton_fwd_lane``) folds pass 2 into pass 3: each segment's program first
runs the carry over the segments before it (i_s steps of h = exp(A sum dt) h + S, the same fp32
arithmetic), so a split forward is two launches, not three (host time of batch-1 calls; the
carry kernel was 5 us of GPU time at (1, 1536, 4096, 16), 28 us at (1, 1024, 65536, 16)).

The backward mirrors it with the adjoint, which needs no states: g_t = C_t dy_t + a_{t+1} g_{t+1}
(Note [selective scan backward]); a local reverse pass per segment from a zero adjoint, a carry
pass from the right, then the real backward per segment from its carried adjoint. With one
segment (enough channels) passes 1 and 2 are skipped and the walk is the plain sequential one.
On the lane backward's path the local pass runs on the lane forward's tiles (in the states
kernel, below) and the carry pass reads and writes (dim, NP) buffers (``DN``): H200, 2026-12-01,
1.16 -> 0.43 ms at (1, 1024, 65536, 16).

On the lane paths a local pass runs only for the segments whose result is read: the forward's
for all but the last, the backward's for all but the first (NSEG - 1 programs on axis 2). The
folds (the forward's real pass, and the lane backward's main kernel up to
``Policy.fold_max_segments`` segments, where it replaces the carry kernel) go through
``triton_fwd_lane.fold_segments``, four segments' loads at a time (H200, 2026-12-02, under CUDA
graphs: (1, 1536, 4096, 16) bf16 forward+backward 0.482 -> 0.475 ms, (1, 1024, 65536, 16) bf16
forward 1.082 -> 1.066; ``benchmarks/RESULTS.md``).

Where the forward splits L into segments of whole tiles, the local pass runs
``Policy.local_fine`` (2) times as many, shorter segments as the real pass (the kernels'
``FOLD``; real segment s then folds the 2 s local segments before it): the segments are planned
for the real pass's waves (161 registers, 6 two-warp programs a multiprocessor), which left the
local pass (64 registers, 16) at 0.68 of a wave. The two-channel real pass folds both halves 8
segments at a time (``triton_fwd_lane2._fold_pair``, ``Policy.fold_group``), so that the
longer fold costs no more load latency than the shorter one did. H200, 2026-12-04, (1, 1536,
4096) bf16 forward under CUDA graphs 0.0987 -> 0.0938 ms (local pass 39.6 -> 34.8 us, real pass
54.6 -> 53.8 us).

Local segments of a length of their own (so that the local pass fills whole waves whatever
the real segments are; a real segment then starting inside a local one reads a snapshot that
local program keeps) were measured slower at every length: the snapshot cost the local pass 16
registers (12 programs a multiprocessor, not 16), and one full wave of longer local programs
took longer than 1.36 waves of these.

The lane backward's local pass runs inside the states kernel
(``triton_bwd_lane._selective_scan_bwd_lane_states_kernel`` with ``ADJ``; the plan's
``states = "lane_adj"``):
one program per segment walks its chunks forward from the first checkpoint, writing the
tile-start states as before, and on the same a_t = exp2(dt_t A2) also keeps P = a_{t_beg} ...
a_t and sums g += P C_t dy_t, which is the local pass's a_{t_beg} g_{t_beg} from zero summed
forward instead of backward: one exp2 per (d, n, t) for both passes instead of two, and one
launch fewer (H200, 2026-12-02, forward+backward under CUDA graphs: (1, 1536, 4096, 16) bf16
0.478 -> 0.460 ms, (1, 1024, 65536, 16) bf16 4.513 -> 4.375; sm_90 SASS, bf16: 53 instructions
per step against the states kernel's 31 alone, capped at 128 registers from 164, no spills).

The lane forward's segments are whole tiles, not checkpoint chunks (the plan's ``SEG_T``,
its kernel's ``SEG_T``): a checkpoint is stored by whichever segment holds its step, so a
boundary may fall inside a chunk, and the count can be picked to fill the real pass's waves
(``plan.fill_waves``: at (1, 1536, 4096, 16) the chunk policy's 16 segments were 1.45 waves
of 8 two-warp programs a multiprocessor, 22 fill 2; H200, 2026-12-03, bf16 forward under CUDA
graphs 0.108 -> 0.102 ms, fp32 0.122 -> 0.115).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv
from ssmscan.ops.common.launch_options import DEFAULT as DEFAULT_LAUNCH
from ssmscan.ops.common.launch_options import LaunchOptions

LOG2E = math.log2(math.e)
TILE_T = 4


@triton.jit
def _fold_chunk_sums(dA_tot, dD_tot, db_tot, dA_acc, dD_acc, db_acc):
    """Note [long sums] (``shapes``): a chunk's sums of dA / dD / ddelta_bias added into the
    totals; returns the totals and the chunk sums restarted from zero."""
    return (
        dA_tot + dA_acc,
        dD_tot + dD_acc,
        db_tot + db_acc,
        tl.zeros_like(dA_acc),
        tl.zeros_like(dD_acc),
        tl.zeros_like(db_acc),
    )


@triton.jit
def _prefetch_l1(p):
    """The L1 prefetch of the line at each pointer of ``p`` (GPU only: a hint, nothing
    loaded into registers; the lane backward's next-tile B / C)."""
    # one line, no backslash escapes (Note [kernel sources under Inductor] in
    # ``ssmscan.ops.common.triton_launch``)
    tl.inline_asm_elementwise(
        "prefetch.global.L1 [$1]; mov.u32 $0, 0;",
        "=r,l",
        [p],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


@triton.jit
def _rcp(x, PTX: tl.constexpr):
    """1 / x: with PTX, one MUFU.RCP (``rcp.approx.ftz.f32``, at most 1 ulp off; Triton's ``/``
    is ``div.full.f32``, 8 instructions with its range scaling, H100/H200 SASS); without (the
    interpreter, a GPU without PTX), a division. Callers' denominators are >= 1."""
    if PTX:
        return tl.inline_asm_elementwise(
            "rcp.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        return 1.0 / x


@triton.jit
def _softplus(x):
    """softplus(x) = max(x, 0) + log1p(y), y = exp(-|x|) in (0, 1], with log1p(y) = y q(y), q a
    degree-8 polynomial fitted to log1p(y) / y on [0, 1] (near-minimax, Chebyshev nodes with
    Lawson reweighting; relative error 2.1e-7 in fp32 Horner, numpy). One exp2 and 8 FMAs, no
    reciprocal and no log: libdevice's log is a ~20 instruction polynomial; the form before this
    (s = y / (2 + y), log1p(y) = 2 atanh(s) as its series to s^11) took a MUFU.RCP an element, and
    MUFU is one of the two bounds of the batch-1 forward (Note [selective scan forward lanes]).
    Above x = 20 the log1p term is below half an ulp of x, so the result is x, as F.softplus's
    threshold gives; NaN stays NaN. Max relative error vs float64 on float32 inputs in [-10, 5]
    below 1e-6 (the rounding of |x| * log2(e), as in any exp; ``test_triton_math``)."""
    y = tl.exp2(tl.abs(x) * -1.4426950408889634)
    q = y * 0.005383586511015892 - 0.030108531937003136
    q = q * y + 0.07920580357313156
    q = q * y - 0.13746106624603271
    q = q * y + 0.1914481669664383
    q = q * y - 0.24852849543094635
    q = q * y + 0.3332032859325409
    q = q * y - 0.49999552965164185
    q = q * y + 1.0
    return tl.maximum(x, 0.0) + y * q


@triton.jit
def _bfly(x, MASK: tl.constexpr):
    """Lane ``laneid ^ MASK``'s x (``shfl.sync.bfly``; fp32 through its bits; GPU only: the
    interpreter has no inline PTX). The backward's reduce-scatters (``tile_rs`` and the split
    kernel) use it."""
    xi = x.to(tl.int32, bitcast=True)
    if MASK == 1:
        r = tl.inline_asm_elementwise(
            "shfl.sync.bfly.b32 $0, $1, 1, 0x1f, -1;", "=r,r", [xi], tl.int32, True, 1
        )
    elif MASK == 2:
        r = tl.inline_asm_elementwise(
            "shfl.sync.bfly.b32 $0, $1, 2, 0x1f, -1;", "=r,r", [xi], tl.int32, True, 1
        )
    elif MASK == 4:
        r = tl.inline_asm_elementwise(
            "shfl.sync.bfly.b32 $0, $1, 4, 0x1f, -1;", "=r,r", [xi], tl.int32, True, 1
        )
    elif MASK == 8:
        r = tl.inline_asm_elementwise(
            "shfl.sync.bfly.b32 $0, $1, 8, 0x1f, -1;", "=r,r", [xi], tl.int32, True, 1
        )
    else:
        r = tl.inline_asm_elementwise(
            "shfl.sync.bfly.b32 $0, $1, 16, 0x1f, -1;", "=r,r", [xi], tl.int32, True, 1
        )
    return r.to(tl.float32, bitcast=True)


@triton.jit
def _sigmoid(x, PTX: tl.constexpr):
    """1 / (1 + exp(-x)) with exp2 (``tl.exp`` adds four instructions of denormal handling) and
    ``_rcp``."""
    return _rcp(1.0 + tl.exp2(x * -1.4426950408889634), PTX)


@triton.jit
def _tile_offsets(row, m_d, o_t, t0, L):
    """(mask, offsets) of the (BLOCK_D, TT) tile of steps t0 .. t0 + TT - 1 that
    ``_tile_inputs`` loads and the caller stores its gradients at. Computed apart from the loads
    (a function taking no pointers): torch's mutation analysis of a traced launch takes a value a
    call returns as derived from every argument of the call, so offsets returned beside loads of
    u / delta / dout / z made every store at them a write to those inputs (Note [traced kernels'
    inline asm] in ``triton_bwd_lane``)."""
    o_tt = t0 + o_t
    m = m_d[:, None] & (o_tt < L)[None, :]
    p = row[:, None] + o_tt[None, :]
    return m, p


@triton.jit
def _tile_inputs(
    u,
    delta,
    dout,
    z,
    m,
    p,
    b_bias,
    SOFTPLUS: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PTX: tl.constexpr,
):
    """The (BLOCK_D, TT) tiles at ``_tile_offsets`` (mask m, offsets p), each thread one row of
    TT contiguous steps (Note [selective scan backward tiles] in ``triton_bwd``; the split
    kernel's [1, 2] x [8, 4] layout instead spreads a row over 4 threads): (u, x = delta + bias,
    dt, dout, z, sigmoid(z), dy)."""
    b_u = tl.load(u + p, mask=m, other=0.0).to(tl.float32)
    b_x = tl.load(delta + p, mask=m, other=0.0).to(tl.float32)
    if HAS_BIAS:
        b_x += b_bias[:, None]
    if SOFTPLUS:
        b_dt = _softplus(b_x)
    else:
        b_dt = b_x
    b_dt = tl.where(m, b_dt, 0.0)  # padded steps: decay 1, input 0
    b_do = tl.load(dout + p, mask=m, other=0.0).to(tl.float32)
    if HAS_Z:
        b_z = tl.load(z + p, mask=m, other=0.0).to(tl.float32)
        sig_z = _sigmoid(b_z, PTX)
        b_dy = b_do * b_z * sig_z
    else:
        b_z = b_do
        sig_z = b_do
        b_dy = b_do
    return b_u, b_x, b_dt, b_do, b_z, sig_z, b_dy


def as_f32(x: torch.Tensor) -> torch.Tensor:
    """x as a contiguous fp32 tensor: x itself when it is one (no dispatched no-op ``to``: each
    op call is host time, and host time is what bounds batch-1 eager calls)."""
    if x.dtype == torch.float32 and x.is_contiguous():
        return x
    return x.to(torch.float32).contiguous()


def prep_A(A: torch.Tensor, NP: int) -> torch.Tensor:
    """A (dim, N) -> A * log2(e) as (dim, NP) fp32, zero-padded: the forward's state-contiguous
    layout."""
    N = A.shape[1]
    a2 = as_f32(A) * LOG2E
    if NP != N:
        a2 = torch.nn.functional.pad(a2, (0, NP - N))
    return a2.contiguous()


def prep_BC(X: torch.Tensor, batch: int, NP: int) -> torch.Tensor:
    """B or C, (batch, N, L) or (batch, G, N, L) -> (batch, G, L, NP) fp32, zero-padded states:
    the 2-D kernels' copies (one copy kernel: cast and transpose together); the lane kernels'
    time-padded ones are ``prep_BC_lane``'s."""
    if X.dim() == 3:
        X = X.unsqueeze(1)
    _b, G, N, L = X.shape
    shape = (batch, G, L, NP)
    if NP == N:
        xt = torch.empty(shape, dtype=torch.float32, device=X.device)
        xt.copy_(X.transpose(2, 3))
    else:
        xt = torch.zeros(shape, dtype=torch.float32, device=X.device)
        xt[..., :N].copy_(X.transpose(2, 3))
    return xt


@triton.jit
def _prep_bc_kernel(
    B,  # (batch, G, N, L) any strides (elements: sBb, sBg, sBn, sBl), any float dtype
    C,  # (batch, G, N, L) any strides (sCb, sCg, sCn, sCl)
    out,  # (2, batch, G, LP, NP) fp32 (or B's / C's 16-bit dtype) out: B's then C's time-major copy
    batch,
    G,
    N,
    L,
    LP,
    sBb,
    sBg,
    sBn,
    sBl,
    sCb,
    sCg,
    sCn,
    sCl,
    NP: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """``prep_BC_lane``: BLOCK_T steps of B (program axis 1 = 0) or C (1) of one (batch, group),
    cast to fp32 and transposed, zeros at the padded states and steps. Program axis 0 runs over
    (batch x group, step block), so batch x G is not bound by the grid's 65535 on axis 1; every
    offset is int64 (a time stride of a channels-last view times 1M steps overflows int32)."""
    nt = tl.cdiv(LP, BLOCK_T)
    i = tl.program_id(0)
    i_t = i % nt
    i_bg = i // nt
    which = tl.program_id(1)
    b = (i_bg // G).to(tl.int64)
    g = (i_bg % G).to(tl.int64)
    o_t = i_t.to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    o_n = tl.arange(0, NP)
    m = (o_n < N)[:, None] & (o_t < L)[None, :]  # loaded (NP, BLOCK_T): steps contiguous
    if which == 0:  # (separate pointer names: B and C may differ in dtype)
        pB = B + b * sBb + g * sBg + o_n[:, None].to(tl.int64) * sBn + o_t[None, :] * sBl
        x = tl.load(pB, mask=m, other=0.0).to(tl.float32)
    else:
        pC = C + b * sCb + g * sCg + o_n[:, None].to(tl.int64) * sCn + o_t[None, :] * sCl
        x = tl.load(pC, mask=m, other=0.0).to(tl.float32)
    base = ((which * batch + b) * G + g) * LP * NP
    q = out + base + o_t[:, None] * NP + o_n[None, :]
    tl.store(q, tl.trans(x).to(out.dtype.element_ty), mask=(o_t < LP)[:, None])


def prep_BC_lane(
    B: torch.Tensor,
    C: torch.Tensor,
    batch: int,
    NP: int,
    steps: int,
    dtype: torch.dtype = torch.float32,
    options: LaunchOptions = DEFAULT_LAUNCH,
) -> tuple[torch.Tensor, torch.Tensor]:
    """B and C, (batch, N, L) or (batch, G, N, L), any strides -> their (batch, G, steps, NP)
    time-major copies in ``dtype`` (fp32, or B's and C's own 16-bit dtype: the forward's
    the plan's ``bc16``), zero-padded states and steps (``steps`` >= L): ``prep_BC``'s
    lane copies, both in one kernel launch (one launch fewer, no separate pad: host time of
    batch-1 calls) into one buffer; the two are views of it. ``options``: the launch's
    (``LaunchOptions``)."""
    if dtype != torch.float32 and not (B.dtype == C.dtype == dtype):
        raise ValueError(
            f"prep_BC_lane: a {dtype} copy of B ({B.dtype}) and C ({C.dtype}) would round them; "
            "expected both of that dtype or a float32 copy"
        )
    from ssmscan.ops.common.triton_launch import launcher

    def strides(X: torch.Tensor) -> tuple[int, ...]:  # (batch, G, N, L), G = 1 for 3-D
        s = X.stride()
        return (s[0], 0, s[1], s[2]) if X.dim() == 3 else s

    G, N, L = (1, *B.shape[1:]) if B.dim() == 3 else B.shape[1:]
    out = torch.empty((2, batch, G, steps, NP), dtype=dtype, device=B.device)
    block_t = 64
    launcher(_prep_bc_kernel, None, options)[(cdiv(steps, block_t) * batch * G, 2)](
        B, C, out, batch, G, N, L, steps, *strides(B), *strides(C), NP=NP, BLOCK_T=block_t,
        num_warps=4,
    )  # fmt: skip
    bt, ct = out.unbind(0)
    return bt, ct


def num_groups(B: torch.Tensor) -> int:
    return 1 if B.dim() == 3 else B.shape[1]
