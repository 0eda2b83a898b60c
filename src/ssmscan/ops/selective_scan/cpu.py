"""CPU realization of the selective scan: ops ``ssmscan::selective_scan_fwd_cpu`` and
``ssmscan::selective_scan_bwd_cpu`` over the C kernels in ``ops/common/cpu_kernels*.{c,h}``.

Half-precision inputs are computed in float32 (the state dtype); float64 in float64.
"""

from __future__ import annotations

import torch
from torch.library import custom_op

from ssmscan._library import qualname
from ssmscan.ops.common import cpu_lib
from ssmscan.ops.common.cpu_lib import ptr
from ssmscan.ops.selective_scan.shapes import (
    CHECKPOINT_LEN,
    empty_backward_outputs,
    empty_forward_outputs,
    state_dtype,
)


def _as(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if t is None else t.to(dtype).contiguous()


def _time_major(B: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(batch, N, L) or (batch, G, N, L) -> contiguous (batch, G, L, N) in ``dtype``."""
    B4 = B if B.dim() == 4 else B.unsqueeze(1)
    return B4.to(dtype).transpose(-1, -2).contiguous()


def _workspace(workers: int, N: int, dtype: torch.dtype) -> torch.Tensor:
    K = CHECKPOINT_LEN
    return torch.empty(workers, 2 * K * N + 8 * K + 4 * N, dtype=dtype)


@custom_op(qualname("selective_scan_fwd_cpu"), mutates_args=(), device_types="cpu")
def selective_scan_fwd_cpu(
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
    out, last, ckpt = empty_forward_outputs(u, A)
    cdt = state_dtype(u.dtype)
    batch, dim, L = u.shape
    N = A.shape[1]
    G = 1 if B.dim() == 3 else B.shape[1]
    uc, dc, zc = _as(u, cdt), _as(delta, cdt), _as(z, cdt)
    Ac, Dc, bc, h0 = _as(A, cdt), _as(D, cdt), _as(delta_bias, cdt), _as(initial_state, cdt)
    Bt, Ct = _time_major(B, cdt), _time_major(C, cdt)
    out_c = out if out.dtype == cdt else torch.empty(out.shape, dtype=cdt)
    rows = batch * dim
    workers = cpu_lib.num_workers(rows)
    work = _workspace(workers, N, cdt)
    fn = cpu_lib.kernel("ssm_fwd", cdt)

    def run(i: int, begin: int, end: int) -> None:
        fn(
            ptr(uc),
            ptr(dc),
            ptr(Ac),
            ptr(Bt),
            ptr(Ct),
            ptr(Dc),
            ptr(zc),
            ptr(bc),
            ptr(h0),
            int(delta_softplus),
            dim,
            L,
            N,
            G,
            CHECKPOINT_LEN,
            begin,
            end,
            ptr(out_c),
            ptr(last),
            ptr(ckpt),
            ptr(work[i]),
        )

    if rows:
        cpu_lib.run_ranges(run, rows, workers)
    elif initial_state is not None:
        last.copy_(initial_state)
    if out_c is not out:
        out.copy_(out_c)
    return out, last, ckpt


@selective_scan_fwd_cpu.register_fake
def _(u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus):
    return empty_forward_outputs(u, A)


@custom_op(qualname("selective_scan_bwd_cpu"), mutates_args=(), device_types="cpu")
def selective_scan_bwd_cpu(
    dout: torch.Tensor,
    dlast_state: torch.Tensor | None,
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    checkpoints: torch.Tensor,
    delta_softplus: bool,
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]
]:
    du, ddelta, dA, dB, dC, optional = empty_backward_outputs(
        u, delta, A, B, C, D, z, delta_bias, initial_state
    )
    cdt = state_dtype(u.dtype)
    batch, dim, L = u.shape
    N = A.shape[1]
    G = 1 if B.dim() == 3 else B.shape[1]
    rows = batch * dim
    workers = cpu_lib.num_workers(rows)
    uc, dc, zc, doc = _as(u, cdt), _as(delta, cdt), _as(z, cdt), _as(dout, cdt)
    Ac, Dc, bc = _as(A, cdt), _as(D, cdt), _as(delta_bias, cdt)
    dlc, ck = _as(dlast_state, cdt), checkpoints.contiguous()
    Bt, Ct = _time_major(B, cdt), _time_major(C, cdt)

    du_c = torch.empty((batch, dim, L), dtype=cdt)
    ddelta_c = torch.empty((batch, dim, L), dtype=cdt)
    dz_c = torch.empty((batch, dim, L), dtype=cdt) if z is not None else None
    dh0 = torch.empty((batch, dim, N), dtype=cdt)
    # per-worker partial sums of the shared parameters: summed afterwards in a fixed order, so
    # results are deterministic for a given thread count
    dA_p = torch.zeros((workers, dim, N), dtype=cdt)
    dBt_p = torch.zeros((workers, batch, G, L, N), dtype=cdt)
    dCt_p = torch.zeros((workers, batch, G, L, N), dtype=cdt)
    dD_p = torch.zeros((workers, dim), dtype=cdt)
    dbias_p = torch.zeros((workers, dim), dtype=cdt)
    work = _workspace(workers, N, cdt)
    fn = cpu_lib.kernel("ssm_bwd", cdt)

    def run(i: int, begin: int, end: int) -> None:
        fn(
            ptr(doc),
            ptr(dlc),
            ptr(uc),
            ptr(dc),
            ptr(Ac),
            ptr(Bt),
            ptr(Ct),
            ptr(Dc),
            ptr(zc),
            ptr(bc),
            ptr(ck),
            int(delta_softplus),
            dim,
            L,
            N,
            G,
            CHECKPOINT_LEN,
            begin,
            end,
            ptr(du_c),
            ptr(ddelta_c),
            ptr(dz_c),
            ptr(dA_p[i]),
            ptr(dBt_p[i]),
            ptr(dCt_p[i]),
            ptr(dD_p[i]),
            ptr(dbias_p[i]),
            ptr(dh0),
            ptr(work[i]),
        )

    if rows:
        cpu_lib.run_ranges(run, rows, workers)
    elif dlast_state is not None:
        dh0.copy_(dlast_state)
    else:
        dh0.zero_()
    du.copy_(du_c)
    ddelta.copy_(ddelta_c)
    dA.copy_(dA_p.sum(0))
    dB.copy_(dBt_p.sum(0).transpose(-1, -2).reshape(dB.shape))
    dC.copy_(dCt_p.sum(0).transpose(-1, -2).reshape(dC.shape))
    computed = {"D": dD_p.sum(0), "z": dz_c, "delta_bias": dbias_p.sum(0), "initial_state": dh0}
    present = [k for k, t in zip(computed, (D, z, delta_bias, initial_state)) if t is not None]
    for buf, key in zip(optional, present):
        grad = computed[key]
        assert grad is not None  # present: the input was given
        buf.copy_(grad)
    return du, ddelta, dA, dB, dC, optional


@selective_scan_bwd_cpu.register_fake
def _(
    dout,
    dlast_state,
    u,
    delta,
    A,
    B,
    C,
    D,
    z,
    delta_bias,
    initial_state,
    checkpoints,
    delta_softplus,
):
    return empty_backward_outputs(u, delta, A, B, C, D, z, delta_bias, initial_state)
