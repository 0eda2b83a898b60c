"""The backward's reduction: the main kernels' per-block partial sums of dB / dC (and, where
the layouts allow, dA / dD / ddelta_bias) summed in a fixed order (deterministic) and written
into the gradients, transposed and cast, by one kernel (host time of small launches bounds
batch-1 calls); torch ops where a gradient is not contiguous."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.host_math import cdiv
from ssmscan.ops.common.launch_options import LaunchOptions
from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.selective_scan.plan import BackwardPlan


@triton.jit
def _sum_partials_group(p, j0, stride, m, NBG, U: tl.constexpr):
    """Partials j0 .. j0 + U - 1 of a (BLOCK_L, NP) tile (those past NBG masked: not read)."""
    xs = ()
    for i in tl.static_range(U):
        x = tl.load(p + (j0 + i) * stride, mask=m & (j0 + i < NBG), other=0.0)
        xs = xs + (x,)  # type: ignore[assignment]  # noqa: RUF005  (Triton tuples)
    return xs


@triton.jit
def _sum_rows_small(
    lin, nprog, which, rows, dAp, dA, dDp, dD, dbp, dbias, n_A, dim, HAS_A: tl.constexpr,
    HAS_D: tl.constexpr, HAS_BIAS: tl.constexpr,
):  # fmt: skip
    """The finish kernel's programs for dA (which 2), dD (3), ddelta_bias (4): out[o] = the sum
    of p[r, o] over the rows in order, 512 elements a program and step, the programs striding
    over the outputs."""
    BLOCK: tl.constexpr = 512
    if which == 2:
        if HAS_A:
            _sum_rows(lin, nprog, rows, dAp, dA, n_A, BLOCK)
    elif which == 3:
        if HAS_D:
            _sum_rows(lin, nprog, rows, dDp, dD, dim, BLOCK)
    else:
        if HAS_BIAS:
            _sum_rows(lin, nprog, rows, dbp, dbias, dim, BLOCK)


@triton.jit
def _sum_rows(lin, nprog, rows, p, out, n, BLOCK: tl.constexpr):
    lin = lin.to(tl.int64)  # lin * BLOCK overflows int32 on grids of 4M programs
    for o0 in range(lin * BLOCK, n, nprog.to(tl.int64) * BLOCK):
        o = o0 + tl.arange(0, BLOCK)
        m = o < n
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        q = p + o  # row r at q + r * n, stepped (64-bit pointer arithmetic)
        for _r in range(0, rows):
            acc += tl.load(q, mask=m, other=0.0)
            q += n
        tl.store(out + o, acc.to(out.dtype.element_ty), mask=m)


@triton.jit
def _selective_scan_bwd_sum_partials_kernel(
    partB,  # (G * NBG, batch, L, NP) fp32: the per-block dB partials
    partC,  # (G * NBG, batch, L, NP) fp32: the per-block dC partials
    dB,  # (batch, G, N, L) out, B's dtype
    dC,  # (batch, G, N, L) out, C's dtype
    NBG,  # channel blocks per group
    batch,
    L,
    G,
    rows,  # (batch x segment) rows of the small partials below
    dAp,  # (rows, dim * NP) fp32 partial dA (NP == N: dA's layout), or None
    dA,  # (dim * NP,) out, or None
    dDp,  # (rows, dim) fp32 partial dD, or None
    dD,  # (dim,) out, or None
    dbp,  # (rows, dim) fp32 partial ddelta_bias, or None
    dbias,  # (dim,) out, or None
    n_A,  # dim * NP
    dim,
    N: tl.constexpr,
    NP: tl.constexpr,
    BLOCK_L: tl.constexpr,
    U: tl.constexpr,  # partials loaded per group
    HAS_A: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    """dB / dC (program axis 1: which = 0 / 1) = the sum of their per-block partials over a
    group's blocks, in fixed order (deterministic), written transposed to (N, L) and cast: what
    the launcher's ``torch.sum`` + transposing copy do, in one launch for both
    ; the programs of which = 2 / 3 / 4 sum dA / dD / ddelta_bias over their
    (batch, segment) rows the same way (``_sum_rows_small``), the launches of three more
    ``torch.sum`` saved.

    A pure stream (the partials are nblk = dim / 8 times the gradients' size: 1.07 GB at (8,
    4096, 2048, 16)), so what sets its speed is the bytes in flight per thread: the partials
    come in groups of U loads, the next group loading while the current one is added (ptxas
    otherwise puts each add right behind its load). H200: 1.07 GB in 249 us, 4.3 TB/s."""
    # program axis 0: (batch x group, step block), so batch x G is not bound by the grid's
    # 65535 on axis 1; axis 1: which
    nl = tl.cdiv(L, BLOCK_L)
    pid = tl.program_id(0)
    i_l = pid % nl
    i_bg = pid // nl
    which = tl.program_id(1)
    if which >= 2:  # dA, dD, ddelta_bias: sums over the rows, all programs of the axis
        _sum_rows_small(
            pid,
            tl.num_programs(0),
            which,
            rows,
            dAp,
            dA,
            dDp,
            dD,
            dbp,
            dbias,
            n_A,
            dim,
            HAS_A,
            HAS_D,
            HAS_BIAS,
        )
        return
    b = (i_bg // G).to(tl.int64)
    g = i_bg % G
    o_l = i_l * BLOCK_L + tl.arange(0, BLOCK_L)
    o_n = tl.arange(0, NP)
    m = (o_l < L)[:, None]
    stride = (b * 0 + batch) * L * NP  # one block's partial, int64 (batch may be a constexpr 1)
    if which == 0:
        part = partB
    else:
        part = partC
    p = part + g.to(tl.int64) * NBG * stride + b * L * NP + o_l[:, None] * NP + o_n[None, :]
    acc = tl.zeros((BLOCK_L, NP), dtype=tl.float32)
    nxt = _sum_partials_group(p, 0, stride, m, NBG, U)
    for j0 in range(U, NBG + U, U):
        cur = nxt
        nxt = _sum_partials_group(p, j0, stride, m, NBG, U)
        t = cur[0]
        for i in tl.static_range(1, U):
            t += cur[i]
        acc += t
    # stored (NP, BLOCK_L): consecutive steps on consecutive lanes (the gradients' last dimension)
    off = ((b * G + g) * N + o_n[:, None]) * L + o_l[None, :]
    mo = (o_l < L)[None, :] & (o_n < N)[:, None]
    acc_t = tl.trans(acc)
    if which == 0:
        tl.store(dB + off, acc_t.to(dB.dtype.element_ty), mask=mo)
    else:
        tl.store(dC + off, acc_t.to(dC.dtype.element_ty), mask=mo)


def finish(plan: BackwardPlan, split: bool, N: int, G: int, L: int, batch: int, dim: int,
            nblk: int, dAp: torch.Tensor, dBp: torch.Tensor, dCp: torch.Tensor,
            dDp: torch.Tensor | None, dbp: torch.Tensor | None, dA: torch.Tensor,
            dB: torch.Tensor, dC: torch.Tensor, dD: torch.Tensor | None,
            dbias: torch.Tensor | None, options: LaunchOptions) -> None:  # fmt: skip
    """The partial sums into the gradients: one kernel where the layouts allow (the host time of
    small launches bounds batch-1 calls), torch ops otherwise."""
    NP, nseg = plan.NP, plan.nseg
    finish = dB.is_contiguous() and dC.is_contiguous()
    in_finish_A = finish and split and NP == N and dA.is_contiguous()  # (dim, NP): dA's layout
    if not in_finish_A:
        if split and NP == N:
            torch.sum(dAp, (0, 1), out=dA)
        elif split:
            dA.copy_(dAp.sum((0, 1))[:, :N])
        else:
            dA.copy_(dAp.sum((0, 1))[:N].t())
    if finish:  # (nblk, batch, L, NP) -> (batch, G, N, L), one cast-and-transpose pass
        block_l = plan.finish_block
        launcher(_selective_scan_bwd_sum_partials_kernel, None, options)[
            (cdiv(L, block_l) * batch * G, 5)
        ](
            dBp, dCp, dB, dC, nblk // G, batch, L, G, batch * nseg, dAp,
            dA if in_finish_A else None, dDp, dD, dbp, dbias, dim * NP, dim, N=N, NP=NP,
            BLOCK_L=block_l, U=plan.sum_unroll, HAS_A=in_finish_A, HAS_D=dD is not None,
            HAS_BIAS=dbias is not None, num_warps=4,
        )  # fmt: skip
        return
    for grad, part in ((dB, dBp), (dC, dCp)):
        red = part.view(G, nblk // G, batch, L, NP).sum(1)[..., :N].permute(1, 0, 3, 2)
        grad.view(batch, G, N, L).copy_(red)
    if dD is not None:
        assert dDp is not None  # both are allocated iff D is given
        torch.sum(dDp, (0, 1), out=dD)
    if dbias is not None:
        assert dbp is not None  # both are allocated iff delta_bias is given
        torch.sum(dbp, (0, 1), out=dbias)
