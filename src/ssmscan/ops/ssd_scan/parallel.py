"""Realization 2 of the SSD scan: the chunked form in plain aten ops (static length).

For backends that convert only aten ops and run no loops (Torch-TensorRT, ONNX at a fixed length).
README.md's Note [SSD chunked form], restructured so that nothing is quadratic in L:

1. the length is padded to a whole number of chunks of Q steps with dt = 0 (decay 1, no input;
   packed sequences continue the last segment), so padded steps change nothing; their outputs
   are sliced off;
2. within each chunk, ``(C Bᵀ ∘ decays) @ (dt x)`` as batched matmuls, the (Q, Q) decays built
   from a masked cumulative sum (no difference of cumulative sums, nothing overflows);
3. each chunk's own end state ``(e ∘ dt x)ᵀ @ B``, heads of a group in one matmul;
4. across chunks, the states entering each chunk by a parallel affine scan over the L / Q chunks
   (:func:`ssmscan.scan.affine_scan`: slices, cats and pointwise ops, O(L / Q) work per level)
   instead of the reference's (chunks + 1)² decay matrix;
5. the carried state read out through C, decayed from the chunk's start.

Memory: the (Q, Q) decays and scores of every chunk and head, (batch, nheads, L / Q, Q, Q), and
the chunk states, (batch, L / Q, nheads, headdim, dstate): linear in L.

No higher-order op, no data-dependent control flow, no ``*_like`` / ``new_*`` factory, no
``alias`` (full-range slices are avoided; Torch-TensorRT's re-decomposition rejects them): every op
is a slice, cat, pad, reshape, permute, cast, comparison, ``where``, cumulative sum, pointwise
op, sum or matmul, so the traced graph passes ``ssmscan.passes.check_tensorrt_ready``. The
length must be static (the chunks are planned at trace time); for a dynamic length use
:mod:`ssmscan.ops.ssd_scan.loop`.

Numerics follow the kernels: arithmetic in float32 (float64 for float64 inputs); ``out`` in
``x``'s dtype and ``final_states`` in the state dtype, both fresh and contiguous (the contract of
``ssmscan::ssd_scan_fwd``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ssmscan.ops.ssd_scan.common import plan_chunk_size, process_dt, state_dtype
from ssmscan.ops.ssd_scan.loop import finish_ssd_output
from ssmscan.scan import Algorithm, affine_scan

__all__ = ["ssd_scan_parallel"]


def _segments(seq_idx: torch.Tensor, cdt: torch.dtype) -> torch.Tensor:
    """``common.segment_ids`` for a static length, as exact integers in ``cdt`` and without a
    constant factory: (batch, L) -> (batch, L)."""
    s = seq_idx.to(cdt)
    if s.shape[1] == 1:  # (a full-range slice would trace as an alias)
        return (s != 0).to(cdt)
    first = (s[:, :1] != 0).to(cdt)
    changes = (s[:, 1:] != s[:, :-1]).to(cdt)
    return torch.cumsum(torch.cat([first, changes], dim=1), dim=1)


def _chunk_decay(log_a: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """exp(sum_{k=j+1..i} log_a[k]) where ``keep[..., i, j]`` (which implies j <= i), else 0:
    (..., Q) -> (..., Q, Q). The sums are a masked cumulative sum, so each entry sums its own
    steps (no cancellation) and no exponent exceeds the largest segment sum."""
    Q = log_a.shape[-1]
    idx = torch.arange(Q, device=log_a.device)
    strict = idx[:, None] > idx[None, :]  # [k, j]: j < k
    rep = log_a.unsqueeze(-1).expand(*log_a.shape, Q)  # rep[..., k, j] = log_a[k]
    seg = torch.cumsum(torch.where(strict, rep, 0.0), dim=-2)  # [i, j]: sum over j < k <= i
    return torch.where(keep, torch.exp(seg), 0.0)


def ssd_scan_parallel(
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
    chunk_size: int | None = None,
    algorithm: Algorithm = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """SSD scan in its chunked matmul form, in plain aten ops (static L), differentiable by
    autograd.

    Same semantics as :func:`ssmscan.ops.ssd_scan.reference.ssd_scan_reference` and the op
    ``ssmscan::ssd_scan_fwd``; arguments are not validated (``ssmscan.ssd_scan`` does that).

    Args:
        x, z: (batch, L, nheads, headdim), float32/float16/bfloat16/float64; L static (an int).
        dt: (batch, L, nheads).
        A, dt_bias: (nheads,).
        B, C: (batch, L, ngroups, dstate); head h reads group h // (nheads // ngroups).
        D: (nheads, headdim) or (nheads,).
        initial_states: (batch, nheads, headdim, dstate); zeros when None.
        seq_idx: (batch, L) int32/int64 sequence index of each token (packed sequences).
        dt_softplus: softplus (threshold 20) of ``dt + dt_bias``.
        dt_limit: ``(min, max)`` clamp of the time step.
        chunk_size: steps per chunk Q; None takes ``common.plan_chunk_size``. Changes the
            rounding and the memory (Q² per chunk and head), not the result.
        algorithm: the parallel scan across chunks ("auto", "hillis_steele", "blelloch",
            "chunked"; :func:`ssmscan.scan.choose_algorithm`).

    Returns:
        ``(out, final_states)``: (batch, L, nheads, headdim) in ``x``'s dtype and
        (batch, nheads, headdim, dstate) in the state dtype (float64 for float64 ``x``, else
        float32); with L = 0 the final state is the initial state (zeros when None).

    Example:
        >>> import torch
        >>> x, dt = torch.randn(1, 5, 2, 3), torch.rand(1, 5, 2) * 0.1
        >>> A, B, C = -torch.rand(2), torch.randn(1, 5, 1, 4), torch.randn(1, 5, 1, 4)
        >>> out, last = ssd_scan_parallel(x, dt, A, B, C, chunk_size=2)
        >>> out.shape, last.shape
        (torch.Size([1, 5, 2, 3]), torch.Size([1, 2, 3, 4]))
    """
    cdt = state_dtype(x.dtype)
    batch, L, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    if not isinstance(L, int):
        raise ValueError(
            "ssd_scan_parallel needs a static length L; use the loop realization "
            "(ssmscan.ops.ssd_scan.loop.ssd_scan_loop) for a dynamic L"
        )
    if L == 0:  # nothing to scan: empty output, the state passes through
        out = finish_ssd_output(x.to(cdt), x, D, z)
        if initial_states is None:
            return out, torch.zeros(batch, nheads, headdim, dstate, dtype=cdt, device=x.device)
        return out, initial_states.to(cdt).clone()
    hpg, G = nheads // ngroups, ngroups
    Q = chunk_size or plan_chunk_size(nheads, headdim, dstate, ngroups)
    Q = min(Q, L)  # one chunk of the whole sequence needs no padding
    nc = -(-L // Q)
    pad = nc * Q - L

    def chunks(t: torch.Tensor) -> torch.Tensor:  # (batch, L, ...) -> (batch, nc, Q, ...), 0-padded
        if pad:
            t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
        return t.reshape(batch, nc, Q, *t.shape[2:])

    d = process_dt(dt, dt_bias, dt_softplus, float(dt_limit[0]), float(dt_limit[1]), cdt)
    dc = chunks(d)  # (b, c, Q, H); padded steps have dt = 0
    Xc = chunks(d.unsqueeze(-1) * x.to(cdt))  # (b, c, Q, H, P): dt x
    Bc = chunks(B.to(cdt)).transpose(2, 3)  # (b, c, G, Q, N)
    Cc = chunks(C.to(cdt)).transpose(2, 3)
    log_a = (dc * A.to(cdt)).permute(0, 1, 3, 2)  # (b, c, H, Q)
    cs = torch.cumsum(log_a, dim=-1)
    cs_last = cs[..., -1:]  # (b, c, H, 1)

    idx = torch.arange(Q, device=x.device)
    keep = idx[:, None] >= idx[None, :]  # (Q, Q) causal, [i, j]: j <= i
    to_end = from_start = carry = None
    if seq_idx is not None:
        seg = _segments(seq_idx, cdt)
        if pad:  # padding continues the last sequence
            seg = torch.cat([seg, seg[:, -1:].expand(batch, pad)], dim=1)
        segc = seg.reshape(batch, nc, Q)
        last = segc[..., -1]  # (b, c): segment at each chunk's end
        prev = last * 0 if nc == 1 else F.pad(last[:, :-1], (1, 0))  # before each chunk
        to_end = (segc == last[..., None]).to(cdt)[:, :, None]  # (b, c, 1, Q)
        from_start = (segc == prev[..., None]).to(cdt)[:, :, None]
        carry = (last == prev).to(cdt)[:, :, None]  # (b, c, 1)
        keep = keep & (segc[..., :, None] == segc[..., None, :])[:, :, None]  # (b, c, 1, Q, Q)

    # 1. within chunks: y_i = sum_{j<=i} (C_i . B_j) exp(cs_i - cs_j) dt_j x_j
    decay = _chunk_decay(log_a, keep).reshape(batch, nc, G, hpg, Q, Q)
    CB = torch.matmul(Cc, Bc.transpose(-1, -2))  # (b, c, G, Q, Q)
    Xh = Xc.permute(0, 1, 3, 2, 4).reshape(batch, nc, G, hpg, Q, headdim)
    y = torch.matmul(CB.unsqueeze(3) * decay, Xh)  # (b, c, G, hpg, Q, P)

    # 2. each chunk's own state at its end: (e ∘ dt x)ᵀ B, heads of a group in one matmul
    e = torch.exp(cs_last - cs)  # (b, c, H, Q)
    e = e if to_end is None else e * to_end
    eX = (Xh * e.reshape(batch, nc, G, hpg, Q, 1)).transpose(-1, -2)  # (b, c, G, hpg, P, Q)
    local = torch.matmul(eX.reshape(batch, nc, G, hpg * headdim, Q), Bc)  # (b, c, G, hpg·P, N)
    local = local.reshape(batch, nc, nheads, headdim, dstate)

    # 3. across chunks: S_{c+1} = k_c S_c + local_c, a parallel affine scan over the chunks
    k = torch.exp(cs_last.squeeze(-1))  # (b, c, H)
    k = k if carry is None else k * carry
    h0 = None if initial_states is None else initial_states.to(cdt)
    after = affine_scan(k[..., None, None], local, dim=1, initial=h0, algorithm=algorithm)
    final = after[:, -1]
    if nc == 1:
        entering = None if h0 is None else h0.unsqueeze(1)
    elif h0 is None:
        entering = F.pad(after[:, :-1], (0, 0, 0, 0, 0, 0, 1, 0))
    else:
        entering = torch.cat([h0.unsqueeze(1), after[:, :-1]], dim=1)  # (b, c, H, P, N)

    # 4. the carried state read out through C, decayed from the chunk's start
    if entering is not None:  # (b, c, H, P, N)
        S = entering.reshape(batch, nc, G, hpg * headdim, dstate).transpose(-1, -2)
        CS = torch.matmul(Cc, S).reshape(batch, nc, G, Q, hpg, headdim)
        w = torch.exp(cs)
        w = w if from_start is None else w * from_start
        y = y + CS.permute(0, 1, 2, 4, 3, 5) * w.reshape(batch, nc, G, hpg, Q, 1)

    y = y.permute(0, 1, 4, 2, 3, 5).reshape(batch, nc * Q, nheads, headdim)
    if pad:
        y = y[:, :L]
    return finish_ssd_output(y, x, D, z), final.contiguous()
