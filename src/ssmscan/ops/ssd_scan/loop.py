"""Realization 3 of the SSD scan: ``torch.ops.higher_order.scan`` over time (dynamic L).

For backends that run loops well (ONNX ``Scan``, AOTInductor on CPU, ExecuTorch): the state
(batch, nheads, headdim, dstate) is the scan's carry, one step per time index, O(L) work and
O(batch * nheads * headdim * dstate) state memory. Everything that does not depend on the state
is computed before the loop for all steps at once, in O(L) memory: the time step, the per-head
decay ``exp(dt A)`` (times the restart mask of packed sequences) and ``dt x``; the skip ``D x``
and the gate after it. The length may be symbolic, so one ``torch.export`` program serves every
L; the graph's size does not depend on L.

Heads are viewed as (ngroups, nheads // ngroups) so B and C (batch, L, ngroups, dstate)
broadcast over a group's heads without being repeated.

Packed sequences (``seq_idx``) follow :func:`ssmscan.ops.ssd_scan.common.segment_ids`: the
state is zeroed before every step whose segment differs from the previous step's (segment 0
before the first step, the initial state's), folded into that step's decay.

Numerics follow the kernels: arithmetic in float32 (float64 for float64 inputs); ``out`` in
``x``'s dtype and ``final_states`` in the state dtype, both fresh and contiguous (the contract of
``ssmscan::ssd_scan_fwd``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ssmscan.ops.selective_scan.loop import run_scan
from ssmscan.ops.ssd_scan.common import process_dt, segment_ids, state_dtype

__all__ = ["finish_ssd_output", "ssd_scan_loop"]


def finish_ssd_output(
    y: torch.Tensor,
    x: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
) -> torch.Tensor:
    """``(y + D x) * silu(z)`` in ``y``'s dtype, cast to ``x``'s dtype (contiguous).

    Shared by the loop and the parallel realization.

    Args:
        y: (batch, L, nheads, headdim) in the state dtype; x, z: (batch, L, nheads, headdim);
            D: (nheads, headdim), (nheads,) or None.

    Returns:
        out (batch, L, nheads, headdim) in ``x``'s dtype.
    """
    cdt = y.dtype
    if D is not None:
        Dc = D.to(cdt)
        y = y + (Dc if D.dim() == 2 else Dc.unsqueeze(-1)) * x.to(cdt)
    if z is not None:
        y = y * F.silu(z.to(cdt))
    return y.to(x.dtype).contiguous()


def _step(
    h: torch.Tensor,
    decay: torch.Tensor,
    X: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
) -> list[torch.Tensor]:
    """One time step; carry h (batch, G, H/G, P, N), decay (batch, G, H/G, 1, 1), X = dt x
    (batch, G, H/G, P, 1), B/C (batch, G, 1, 1, N). Returns [h_t, y_t (batch, G, H/G, P)]."""
    h = decay * h + X * B
    return [h, (h * C).sum(-1)]


def ssd_scan_loop(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> tuple[torch.Tensor, torch.Tensor]:
    """SSD scan as a ``higher_order.scan`` loop over L (dynamic L), differentiable by autograd.

    Same semantics as :func:`ssmscan.ops.ssd_scan.reference.ssd_scan_reference` and the op
    ``ssmscan::ssd_scan_fwd``; arguments are not validated (``ssmscan.ssd_scan`` does that).

    Args:
        x, z: (batch, L, nheads, headdim), float32/float16/bfloat16/float64; L may be symbolic
            (>= 1 when symbolic).
        dt: (batch, L, nheads).
        A, dt_bias: (nheads,).
        B, C: (batch, L, ngroups, dstate); head h reads group h // (nheads // ngroups).
        D: (nheads, headdim) or (nheads,).
        initial_states: (batch, nheads, headdim, dstate); zeros when None.
        seq_idx: (batch, L) int32/int64 sequence index of each token (packed sequences).
        dt_softplus: softplus (threshold 20) of ``dt + dt_bias``.
        dt_limit: ``(min, max)`` clamp of the time step.

    Returns:
        ``(out, final_states)``: (batch, L, nheads, headdim) in ``x``'s dtype and
        (batch, nheads, headdim, dstate) in the state dtype (float64 for float64 ``x``, else
        float32); with L = 0 the final state is the initial state (zeros when None).

    Example:
        >>> import torch
        >>> x, dt = torch.randn(1, 5, 2, 3), torch.rand(1, 5, 2) * 0.1
        >>> A, B, C = -torch.rand(2), torch.randn(1, 5, 1, 4), torch.randn(1, 5, 1, 4)
        >>> out, last = ssd_scan_loop(x, dt, A, B, C)
        >>> out.shape, last.shape
        (torch.Size([1, 5, 2, 3]), torch.Size([1, 2, 3, 4]))
    """
    cdt = state_dtype(x.dtype)
    batch, L, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    hpg = nheads // ngroups
    if initial_states is None:
        h0 = torch.zeros((batch, ngroups, hpg, headdim, dstate), dtype=cdt, device=x.device)
    else:
        h0 = initial_states.to(cdt).reshape(batch, ngroups, hpg, headdim, dstate)
    if isinstance(L, int) and L == 0:  # the scan op needs one step at least
        y = x.to(cdt)  # (batch, 0, nheads, headdim)
        return finish_ssd_output(y, x, D, z), h0.reshape(batch, nheads, headdim, dstate).clone()
    d = process_dt(dt, dt_bias, dt_softplus, float(dt_limit[0]), float(dt_limit[1]), cdt)
    decay = torch.exp(d * A.to(cdt))  # (batch, L, nheads)
    if seq_idx is not None:
        seg = segment_ids(seq_idx)
        prev = torch.cat([seg[:, :1] * 0, seg], dim=1)[:, :L]  # no size L - 1 (symbolic L)
        decay = decay * (seg == prev).to(cdt)[..., None]
    X = d.unsqueeze(-1) * x.to(cdt)  # (batch, L, nheads, headdim)
    # time-major sequences: one slice per step
    xs = [
        decay.movedim(1, 0).reshape(L, batch, ngroups, hpg, 1, 1),
        X.movedim(1, 0).reshape(L, batch, ngroups, hpg, headdim, 1),
        B.to(cdt).movedim(1, 0).reshape(L, batch, ngroups, 1, 1, dstate),
        C.to(cdt).movedim(1, 0).reshape(L, batch, ngroups, 1, 1, dstate),
    ]
    last, ys = run_scan(_step, h0, xs)
    y = ys.reshape(L, batch, nheads, headdim).movedim(0, 1)
    out = finish_ssd_output(y, x, D, z)
    return out, last.reshape(batch, nheads, headdim, dstate).contiguous()
