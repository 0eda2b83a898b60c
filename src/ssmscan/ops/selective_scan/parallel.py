"""Realization 2 of the selective scan: a parallel scan in plain aten ops (static length).

For backends that convert only aten ops and run no loops (Torch-TensorRT, ONNX at a fixed length):
the per-step decays ``exp(dt * A)`` and inputs ``dt * B * u`` are materialized as two
(batch, dim, N, L) tensors and solved with :func:`ssmscan.scan.affine_scan` along L; the outputs are
a reduction over N. No higher-order op, no constant factory (``zeros_like``, ``new_*``; L >= 1), no
loop: every op is a slice, cat, reshape, unsqueeze, cast, pointwise op or sum, so the graph traces
with ``make_fx``/``torch.export`` into ops that Torch-TensorRT converts and the ONNX dynamo exporter
translates. The length must be static (the scans' slices are planned at trace time); for a dynamic
length use :mod:`ssmscan.ops.selective_scan.loop`. Checked on torch 2.13 CPU: the traced graph
passes ``ssmscan.passes.check_tensorrt_ready``, exports to ONNX (runs in ONNX Runtime) and compiles
with AOTInductor; timings in :mod:`ssmscan.passes.decompose_selective_scan`.

Numerics follow the kernels: all arithmetic in float32 (float64 for float64 inputs); ``out`` in the
dtype of ``u``, ``last_state`` in the state dtype, both fresh and contiguous (the contract of
``ssmscan::selective_scan_fwd``, :mod:`ssmscan.ops.selective_scan.shapes`).

Layout: channels are viewed as (G, dim // G) so grouped B/C (batch, G, N, L) broadcast without
being repeated; 3-D B/C are the case G = 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ssmscan.ops.selective_scan.checks import check_canonical_forms
from ssmscan.ops.selective_scan.shapes import state_dtype
from ssmscan.scan import Algorithm, affine_scan

__all__ = ["selective_scan_parallel"]


def grouped_inputs(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    delta_bias: torch.Tensor | None,
    delta_softplus: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cast to the state dtype and view channels as (G, dim // G).

    Shared by the parallel and the loop realization.

    Args:
        u, delta: (batch, dim, L); A: (dim, N); B, C: (batch, N, L) or (batch, G, N, L);
        delta_bias: (dim,) or None; delta_softplus: apply softplus to ``delta + delta_bias``.

    Returns:
        ``dt`` and ``dt * u`` as (batch, G, dim // G, L), ``A`` as (G, dim // G, N), ``B`` and
        ``C`` as (batch, G, N, L), all in the state dtype.
    """
    check_canonical_forms("the parallel and loop realizations", A, B, C)
    cdt = state_dtype(u.dtype)
    batch, dim, L = u.shape
    N = A.shape[1]
    groups = 1 if B.dim() == 3 else B.shape[1]
    dt = delta.to(cdt)
    if delta_bias is not None:
        dt = dt + delta_bias.to(cdt).unsqueeze(-1)
    if delta_softplus:
        dt = F.softplus(dt)
    dtu = dt * u.to(cdt)
    per_group = dim // groups
    dt = dt.reshape(batch, groups, per_group, L)
    dtu = dtu.reshape(batch, groups, per_group, L)
    Ag = A.to(cdt).reshape(groups, per_group, N)
    if B.dim() == 3:
        B, C = B.unsqueeze(1), C.unsqueeze(1)
    return dt, dtu, Ag, B.to(cdt), C.to(cdt)


def finish_output(
    y: torch.Tensor,
    u: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
) -> torch.Tensor:
    """``(y + D u) * silu(z)`` in the state dtype, cast to ``u``'s dtype (contiguous).

    Args:
        y: (batch, dim, L) in the state dtype; u, z: (batch, dim, L); D: (dim,) or None.

    Returns:
        out (batch, dim, L) in ``u``'s dtype.
    """
    cdt = y.dtype
    if D is not None:
        y = y + D.to(cdt).unsqueeze(-1) * u.to(cdt)
    if z is not None:
        y = y * F.silu(z.to(cdt))
    return y.to(u.dtype).contiguous()


def selective_scan_parallel(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    initial_state: torch.Tensor | None = None,
    algorithm: Algorithm = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Selective scan as a parallel affine scan over L, in plain aten ops (forward only).

    Same semantics as :func:`ssmscan.ops.selective_scan.reference.selective_scan_reference` and the
    op ``ssmscan::selective_scan_fwd`` (without its checkpoints). Memory: the decays and inputs,
    (batch, dim, N, L) each, plus the scan's temporaries.

    Args:
        u, delta: (batch, dim, L), float32/float16/bfloat16/float64; L static (an int).
        A: (dim, N), float32 (float64 for float64 ``u``).
        B, C: (batch, N, L) or grouped (batch, G, N, L), dtype of ``u`` or the state dtype.
        D, delta_bias: optional (dim,), dtype like ``A``.
        z: optional (batch, dim, L) gate, dtype of ``u``.
        delta_softplus: apply softplus to ``delta + delta_bias``.
        initial_state: optional (batch, dim, N) state before the first step, in the state dtype.
        algorithm: the parallel scan, "auto", "hillis_steele", "blelloch" or "chunked" (see
            :func:`ssmscan.scan.choose_algorithm`).

    Returns:
        ``(out, last_state)``: out (batch, dim, L) in ``u``'s dtype, last_state (batch, dim, N) in
        the state dtype (float64 for float64 ``u``, else float32); with L = 0 the last state is the
        initial state (zeros when None).

    Example:
        >>> import torch
        >>> u, dt = torch.randn(1, 4, 5), torch.rand(1, 4, 5) * 0.1
        >>> A, B, C = -torch.rand(4, 2), torch.randn(1, 2, 5), torch.randn(1, 2, 5)
        >>> out, last = selective_scan_parallel(u, dt, A, B, C)
        >>> out.shape, last.shape
        (torch.Size([1, 4, 5]), torch.Size([1, 4, 2]))
    """
    batch, dim, L = u.shape
    N = A.shape[1]
    if not isinstance(L, int):
        raise ValueError(
            "selective_scan_parallel needs a static length L; use the loop realization "
            "(ssmscan.ops.selective_scan.loop.selective_scan_loop) for a dynamic L"
        )
    dt, dtu, Ag, Bg, Cg = grouped_inputs(u, delta, A, B, C, delta_bias, delta_softplus)
    groups, per_group = Ag.shape[0], Ag.shape[1]
    if L == 0:  # nothing to scan: empty output, the state passes through
        out = finish_output(dt.reshape(batch, dim, 0), u, D, z)
        if initial_state is None:
            return out, torch.zeros(batch, dim, N, dtype=dt.dtype, device=u.device)
        return out, initial_state.to(dt.dtype).clone()
    # (batch, G, dim/G, N, L): decay exp(dt A) and input dt u B at every step
    decay = torch.exp(dt.unsqueeze(3) * Ag.unsqueeze(-1))
    inp = dtu.unsqueeze(3) * Bg.unsqueeze(2)
    h0 = None
    if initial_state is not None:
        h0 = initial_state.to(dt.dtype).reshape(batch, groups, per_group, N)
    states = affine_scan(decay, inp, dim=4, initial=h0, algorithm=algorithm)
    y = (states * Cg.unsqueeze(2)).sum(3).reshape(batch, dim, L)
    last = states.select(4, L - 1).reshape(batch, dim, N).contiguous()
    return finish_output(y, u, D, z), last
