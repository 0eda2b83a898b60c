"""The backward's launches for one ``BackwardPlan`` (``plan``): buffers, the segments' local and
carry passes, the split path's tile-start states, the main kernel and the finish kernel. Every
choice comes from the plan; this module only allocates and launches."""

from __future__ import annotations

from typing import Any

import torch

from ssmscan.ops.common.host_math import cdiv
from ssmscan.ops.common.launch_options import LaunchOptions
from ssmscan.ops.common.triton_launch import launcher
from ssmscan.ops.selective_scan import triton_bwd, triton_bwd_lane, triton_bwd_split
from ssmscan.ops.selective_scan.layout_check import check_bwd_lane_layout, check_lane_layout
from ssmscan.ops.selective_scan.plan import SPLIT_TT, BackwardPlan, lane_geometry
from ssmscan.ops.selective_scan.triton_bwd_lane import _selective_scan_bwd_lane_states_kernel
from ssmscan.ops.selective_scan.triton_bwd_reduce import finish
from ssmscan.ops.selective_scan.triton_common import (
    TILE_T,
    as_f32,
    num_groups,
    prep_A,
    prep_BC,
    prep_BC_lane,
)


class _Inputs:
    """The kernels' forms of the inputs, each made on first use (host time of batch-1 calls)."""

    def __init__(self, B: torch.Tensor, C: torch.Tensor, batch: int, NP: int, LP: int,
                 options: LaunchOptions) -> None:  # fmt: skip
        self.B, self.C, self.batch, self.NP, self.LP = B, C, batch, NP, LP
        self.options = options
        self._plain: dict[int, torch.Tensor] = {}
        self._lane: tuple[torch.Tensor, torch.Tensor] | None = None

    def plain(self, i: int) -> torch.Tensor:
        """(batch, G, L, NP) fp32 copy of B (i = 0) or C (1): the 2-D kernels' layout."""
        if i not in self._plain:
            self._plain[i] = prep_BC((self.B, self.C)[i], self.batch, self.NP)
        return self._plain[i]

    def lane(self) -> tuple[torch.Tensor, torch.Tensor]:
        """B's and C's time-padded copies for the lane kernels, both in one launch."""
        if self._lane is None:
            self._lane = prep_BC_lane(self.B, self.C, self.batch, self.NP, self.LP,
                                      options=self.options)  # fmt: skip
        return self._lane


def run(
    plan: BackwardPlan,
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
    du: torch.Tensor,
    ddelta: torch.Tensor,
    dA: torch.Tensor,
    dB: torch.Tensor,
    dC: torch.Tensor,
    optional_grads: list[torch.Tensor],
    options: LaunchOptions,
) -> None:
    """``triton_bwd.launch``'s work for ``plan`` (its arguments, the plan first; ``options``: how
    the launches are made)."""
    batch, dim, L = u.shape
    N = int(A.shape[1])
    NP, G = plan.NP, int(num_groups(B))
    f32, dev = torch.float32, u.device
    rest = iter(optional_grads)
    dD = next(rest) if D is not None else None
    dz = next(rest) if z is not None else None
    dbias = next(rest) if delta_bias is not None else None
    dinit_out = next(rest) if initial_state is not None else None
    NCK = checkpoints.shape[2]
    CK = plan.CK
    assert NCK == cdiv(L, CK) + 1 and CK % TILE_T == 0 and CK % SPLIT_TT == 0, (NCK, L, CK)
    split = plan.main in ("lane", "split")
    nseg, seg, TT, LP = plan.nseg, plan.seg, SPLIT_TT, plan.LP
    KL, TPL = lane_geometry(NP)
    tbd, tw = plan.tile_block  # the 2-D local / carry passes' blocks
    tblk = cdiv(dim, tbd)
    lane_local = plan.local == "lane"
    ins = _Inputs(B, C, batch, NP, LP, options)
    A2 = prep_A(A, NP)  # (dim, NP): the split kernels'
    # (NP, dim): the tile kernels' and the segments' 2-D local / carry passes'
    need_t = not split or plan.local == "tile"
    A2t = A2.t().contiguous() if need_t else None
    dout_c, u_c, delta_c = dout.contiguous(), u.contiguous(), delta.contiguous()
    z_c = z.contiguous() if z is not None else None
    bias_c = as_f32(delta_bias) if delta_bias is not None else None
    flags = dict(SOFTPLUS=delta_softplus, NP=NP, CK=CK)
    has = dict(HAS_Z=z is not None, HAS_BIAS=delta_bias is not None)

    def states_major(x: torch.Tensor) -> torch.Tensor:
        """(..., dim, N) -> (..., NP, dim) fp32, zero-padded: the 2-D kernels' state layout."""
        y = torch.zeros((*x.shape[:-2], NP, dim), dtype=f32, device=dev)
        y[..., :N, :].copy_(x.transpose(-1, -2))
        return y

    dlast_dn = None  # (dim, NP): the split / lane kernels' state layout
    if split and dlast_state is not None:
        dlast_dn = torch.nn.functional.pad(dlast_state.to(f32), (0, NP - N)).contiguous()
    dlast_t = states_major(dlast_state) if need_t and dlast_state is not None else None
    tstates = ck = seg_loc = seg_dt = seg_adj = None
    if split:  # the forward's checkpoints as they are, padded when N < NP
        ck = checkpoints.contiguous()
        if NP != N:
            ck = torch.nn.functional.pad(ck, (0, NP - N))
        tstates = torch.empty((batch, dim, cdiv(L, TT), NP), dtype=f32, device=dev)
    bcast = u.dtype != torch.float32  # the lane kernels' BCAST_TILE
    # the lane kernels' shuffles assume a layout (checked); without PTX they have none
    states_check = check_lane_layout(KL) if plan.ptx else None
    sbd, sw = plan.states_block
    if lane_local:  # the lane states kernel runs the local pass too, a program per segment
        seg_loc = torch.empty((batch, nseg, dim, NP), dtype=f32, device=dev)
        seg_dt = torch.empty((batch, nseg, dim), dtype=f32, device=dev)
        launcher(_selective_scan_bwd_lane_states_kernel, states_check, options)[
            (cdiv(dim, sbd), batch, nseg)
        ](
            u_c, delta_c, A2, ins.lane()[0], bias_c, ck, tstates, dim, L, LP, G, NCK, **flags,
            HAS_BIAS=delta_bias is not None, BLOCK_D=sbd, KL=KL, TPL=TPL, dout=dout_c, z=z_c,
            Ct=ins.lane()[1], seg_loc=seg_loc, seg_dt=seg_dt, SEG=seg, HAS_Z=z is not None,
            ADJ=True, BCAST_TILE=bcast, PTX=plan.ptx, num_warps=sw,
            **({"maxnreg": plan.states_maxnreg} if plan.states_maxnreg else {}),
        )  # fmt: skip
    elif plan.local == "tile":  # Note [selective scan segments]: the 2-D local adjoint pass
        seg_loc = torch.empty((batch, nseg, NP, dim), dtype=f32, device=dev)
        seg_dt = torch.empty((batch, nseg, dim), dtype=f32, device=dev)
        launcher(triton_bwd._selective_scan_bwd_local_kernel, None, options)[(tblk, batch, nseg)](
            dout_c, delta_c, A2t, ins.plain(1), z_c, bias_c, seg_loc, seg_dt, dim, L, G, NCK - 1,
            seg, **flags, BLOCK_D=tbd, **has, PTX=plan.ptx, num_warps=tw,
        )  # fmt: skip
    if plan.carry == "kernel":  # the adjoint entering each segment, in the local pass's layout
        assert seg_loc is not None  # a carry pass comes with a local pass
        seg_adj = torch.empty_like(seg_loc)
        launcher(triton_bwd._selective_scan_bwd_carry_kernel, None, options)[(tblk, batch)](
            A2 if lane_local else A2t, dlast_dn if lane_local else dlast_t, seg_loc, seg_dt,
            seg_adj, dim, nseg, NP=NP, BLOCK_D=tbd, HAS_DLAST=dlast_state is not None,
            DN=lane_local, num_warps=tw,
        )  # fmt: skip
    if plan.states == "lane":  # every tile's start state, all chunks at once
        launcher(_selective_scan_bwd_lane_states_kernel, states_check, options)[
            (cdiv(dim, sbd), batch, NCK - 1)
        ](
            u_c, delta_c, A2, ins.lane()[0], bias_c, ck, tstates, dim, L, LP, G, NCK, **flags,
            HAS_BIAS=delta_bias is not None, BLOCK_D=sbd, KL=KL, TPL=TPL, dout=None, z=None,
            Ct=None, seg_loc=None, seg_dt=None, SEG=1, HAS_Z=False, ADJ=False,
            BCAST_TILE=bcast, PTX=plan.ptx, num_warps=sw,
        )  # fmt: skip
    elif plan.states == "split":
        launcher(triton_bwd_split._selective_scan_bwd_states_kernel, None, options)[
            (cdiv(dim, sbd), batch, NCK - 1)
        ](
            u_c, delta_c, A2, ins.plain(0), bias_c, ck, tstates, dim, L, G, NCK, **flags,
            HAS_BIAS=delta_bias is not None, BLOCK_D=sbd, TT=TT, num_warps=sw,
        )  # fmt: skip
    # the main kernel: its kernel, B / C, state buffers ((dim, NP) split, (NP, dim) 2-D)
    check: Any = None
    A2_main: torch.Tensor | None  # the 2-D kernels': A2t (made when ``need_t``)
    if split:
        state_shape: tuple[int, int] = (dim, NP)
        seg_adj_main = seg_adj
        if seg_adj is not None and not lane_local:  # the 2-D carry pass's (NP, dim)
            seg_adj_main = seg_adj.transpose(-1, -2).contiguous()
        dlast_main, A2_main = dlast_dn, A2
        if plan.main == "lane":  # Note [selective scan backward lanes]
            kernel = triton_bwd_lane._selective_scan_bwd_lane_kernel
            Bm, Cm = ins.lane()
            lp: tuple[int, ...] = (LP,)
            carry_in_main = plan.carry == "main"
            extra: dict[str, Any] = dict(
                KL=KL, TPL=TPL, EMU=plan.emulate, PREFETCH=True, PREFETCH_BC=plan.prefetch_bc,
                CARRY=carry_in_main,
            )  # fmt: skip
            check = check_bwd_lane_layout() if plan.ptx else None
            # with CARRY the local pass's adjoints and dt sums, else the carried adjoints
            states: tuple = (
                (tstates, seg_loc, seg_dt) if carry_in_main else (tstates, seg_adj_main, None)
            )
        else:
            kernel = triton_bwd_split._selective_scan_bwd_split_kernel
            Bm, Cm, lp = ins.plain(0), ins.plain(1), ()
            extra = dict(TT=TT, EMU=plan.emulate)
            states = (tstates, seg_adj_main)
    else:
        state_shape = (NP, dim)
        dlast_main, A2_main = dlast_t, A2t
        kernel = triton_bwd._selective_scan_bwd_tile_kernel
        Bm, Cm, lp = ins.plain(0), ins.plain(1), ()
        extra = dict(RS=(2 if plan.emulate else True) if plan.main == "tile_rs" else False)
        states = (
            states_major(checkpoints.transpose(1, 2)),  # (batch, NCK, NP, dim)
            seg_adj,
            torch.empty((batch, nseg, CK // 4, NP, dim), dtype=f32, device=dev),
        )
    nblk = cdiv(dim, plan.block_d)
    dAp = torch.empty((batch, nseg, *state_shape), dtype=f32, device=dev)
    # dB's and dC's partials, two allocations: views of one buffer written by the main kernel
    # cost two copies of each under torch.compile (functionalization scatters them back)
    dBp = torch.empty((nblk, batch, L, NP), dtype=f32, device=dev)
    dCp = torch.empty((nblk, batch, L, NP), dtype=f32, device=dev)
    dDp = torch.empty((batch, nseg, dim), dtype=f32, device=dev) if D is not None else None
    dbp = torch.empty((batch, nseg, dim), dtype=f32, device=dev) if delta_bias is not None else None
    dinit = torch.empty((batch, *state_shape), dtype=f32, device=dev)
    launcher(kernel, check, options)[(nblk, batch, nseg)](
        dout_c, dlast_main, u_c, delta_c, A2_main, Bm, Cm, as_f32(D) if D is not None else None,
        z_c, bias_c, *states, du, ddelta, dz, dAp, dBp, dCp, dDp, dbp, dinit, dim, L, *lp, G,
        NCK, seg, **flags, BLOCK_D=plan.block_d, HAS_D=D is not None, **has,
        HAS_DLAST=dlast_state is not None, HAS_SEG=nseg > 1, PTX=plan.ptx, num_warps=plan.warps,
        **extra,
    )  # fmt: skip
    finish(plan, split, N, G, L, batch, dim, nblk, dAp, dBp, dCp, dDp, dbp, dA, dB, dC, dD, dbias,
           options)  # fmt: skip
    if dinit_out is not None:
        dinit_out.copy_(dinit[:, :, :N] if split else dinit[:, :N].transpose(1, 2))
