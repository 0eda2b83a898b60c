"""Mamba-2's state-space dual (SSD) scan, two readable forms: the oracle every fast path is
tested against.

* ``ssd_scan_reference``: one timestep at a time, in float64 when asked.
* ``ssd_scan_chunked_reference``: the chunked (matmul) form of README.md's Note [SSD chunked
  form], in pure aten with no control flow on tensor values and no loop over chunks;
  differentiable by autograd.

Never imports a fast path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ssmscan.ops.ssd_scan.common import process_dt, segment_ids, state_dtype


def _per_head(t: torch.Tensor, nheads: int) -> torch.Tensor:
    """(batch, L, ngroups, N) -> (batch, L, nheads, N): head h reads group h // (nheads // ngroups)."""
    return t.repeat_interleave(nheads // t.shape[2], dim=2)


def _skip_and_gate(
    y: torch.Tensor,
    x: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
) -> torch.Tensor:
    if D is not None:
        Dc = D.to(y.dtype)
        y = y + (Dc if D.dim() == 2 else Dc[:, None]) * x
    if z is not None:
        y = y * F.silu(z.to(y.dtype))
    return y


def ssd_scan_reference(
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
    return_final_states: bool = False,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """SSD scan, one timestep at a time.

    For batch b, head h (group g of h), headdim p, state n, time t::

        dt_t  = clamp(softplus(dt_t[h] + dt_bias[h]), dt_limit)   (bias, softplus optional)
        h_t   = exp(dt_t * A[h]) * h_{t-1} + dt_t * x_t[h, p] * B_t[g, n]
        y_t   = sum_n C_t[g, n] * h_t[p, n] + D[h(, p)] * x_t[h, p]
        out_t = y_t * silu(z_t)                                    (z optional)

    With ``seq_idx`` the state is zeroed before every step where ``seq_idx`` changes, and before
    the first step when ``seq_idx[:, 0] != 0`` (``common.segment_ids``).

    Args:
        x, z: (batch, L, nheads, headdim).
        dt: (batch, L, nheads).
        A, dt_bias: (nheads,).
        B, C: (batch, L, ngroups, dstate); head h reads group h // (nheads // ngroups).
        D: (nheads, headdim) or (nheads,).
        initial_states: (batch, nheads, headdim, dstate), h_{-1}; zeros when None.
        seq_idx: (batch, L) integer sequence index of each token.
        compute_dtype: dtype of all arithmetic; default the state dtype (float64 for float64
            ``x``, else float32).

    Returns:
        ``out`` (batch, L, nheads, headdim) in ``x``'s dtype; with ``return_final_states`` also
        ``h_{L-1}`` (batch, nheads, headdim, dstate) in the state dtype.

    Example:
        >>> import torch
        >>> x, dt = torch.randn(1, 5, 2, 3), torch.rand(1, 5, 2) * 0.1
        >>> A, B, C = -torch.rand(2), torch.randn(1, 5, 1, 4), torch.randn(1, 5, 1, 4)
        >>> ssd_scan_reference(x, dt, A, B, C).shape
        torch.Size([1, 5, 2, 3])
    """
    cdt = compute_dtype or state_dtype(x.dtype)
    batch, L, nheads, headdim = x.shape
    dstate = B.shape[-1]
    d = process_dt(dt, dt_bias, dt_softplus, dt_limit[0], dt_limit[1], cdt)
    xx, AA = x.to(cdt), A.to(cdt)
    BB, CC = _per_head(B.to(cdt), nheads), _per_head(C.to(cdt), nheads)
    h = (
        initial_states.to(cdt).clone()
        if initial_states is not None
        else torch.zeros(batch, nheads, headdim, dstate, dtype=cdt, device=x.device)
    )
    seg = segment_ids(seq_idx) if seq_idx is not None else None
    ys = []
    for t in range(L):
        if seg is not None:
            prev = seg[:, t - 1] if t > 0 else torch.zeros_like(seg[:, 0])
            keep = (seg[:, t] == prev).to(cdt)[:, None, None, None]
            h = h * keep
        dtt = d[:, t, :, None, None]  # (batch, nheads, 1, 1)
        h = torch.exp(dtt * AA[:, None, None]) * h + dtt * xx[:, t, :, :, None] * BB[:, t, :, None]
        ys.append(torch.einsum("bhpn,bhn->bhp", h, CC[:, t]))
    y = torch.stack(ys, dim=1) if L > 0 else xx.new_zeros(batch, 0, nheads, headdim)
    out = _skip_and_gate(y, xx, D, z).to(x.dtype)
    if return_final_states:
        return out, h.to(state_dtype(x.dtype))
    return out


def _segsum_decay(log_a: torch.Tensor, same: torch.Tensor | None) -> torch.Tensor:
    """exp(sum_{k=j+1..i} log_a[k]) for j <= i (and ``same[i, j]``), else 0: (..., T) -> (..., T, T).

    Sums are taken as a masked cumulative sum (no difference of cumulative sums), and the masked
    entries are set to -inf before the exponential, so nothing overflows."""
    T = log_a.shape[-1]
    strict = torch.ones(T, T, dtype=torch.bool, device=log_a.device).tril(-1)
    incl = torch.ones(T, T, dtype=torch.bool, device=log_a.device).tril(0)
    rep = log_a[..., :, None].expand(*log_a.shape, T)  # rep[..., k, j] = log_a[k]
    seg = torch.cumsum(rep.masked_fill(~strict, 0.0), dim=-2)  # sum over j < k <= i
    keep = incl if same is None else incl & same
    return torch.exp(seg.masked_fill(~keep, float("-inf")))


def ssd_scan_chunked_reference(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    compute_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same scan in the chunked form of README.md's Note [SSD chunked form]: within a chunk
    of ``chunk_size`` steps, masked (C·Bᵀ ∘ decays) @ (dt·x); across chunks, the chunk states
    combined by a (chunks+1)² decay matrix (a matmul, no loop), then read out through C.

    Pure aten, no control flow on tensor values, no loop over chunks (the input is zero-padded
    to a whole number of chunks; padded steps have dt = 0, so they neither decay nor add to the
    state). Same arguments as ``ssd_scan_reference``. It exports for a static length; with a
    symbolic L, the einsums' reshapes of the chunk dimension produce guards symbolic shapes
    cannot discharge (``L // Q`` products), which a graph realization has to restructure.

    Returns:
        ``(out, final_states)``: (batch, L, nheads, headdim) in ``x``'s dtype and
        (batch, nheads, headdim, dstate) in the state dtype.

    Example:
        >>> import torch
        >>> x, dt = torch.randn(1, 5, 2, 3), torch.rand(1, 5, 2) * 0.1
        >>> A, B, C = -torch.rand(2), torch.randn(1, 5, 1, 4), torch.randn(1, 5, 1, 4)
        >>> out, last = ssd_scan_chunked_reference(x, dt, A, B, C, chunk_size=2)
        >>> ref, ref_last = ssd_scan_reference(x, dt, A, B, C, return_final_states=True)
        >>> bool(torch.allclose(out, ref, atol=1e-6)), bool(torch.allclose(last, ref_last, atol=1e-6))
        (True, True)
    """
    cdt = compute_dtype or state_dtype(x.dtype)
    batch, L, nheads, headdim = x.shape
    dstate = B.shape[-1]
    Q = chunk_size
    nc = (L + Q - 1) // Q
    pad = nc * Q - L
    d = process_dt(dt, dt_bias, dt_softplus, dt_limit[0], dt_limit[1], cdt)
    xx = x.to(cdt)

    def chunks(t: torch.Tensor) -> torch.Tensor:  # (batch, L, ...) -> (batch, c, Q, ...)
        t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
        return t.reshape(batch, nc, Q, *t.shape[2:])

    xc = chunks(xx)  # (b, c, Q, h, p)
    dc = chunks(d)  # (b, c, Q, h); padded steps have dt = 0
    Bc = chunks(_per_head(B.to(cdt), nheads))  # (b, c, Q, h, n)
    Cc = chunks(_per_head(C.to(cdt), nheads))
    log_a = (dc * A.to(cdt)).permute(0, 3, 1, 2)  # (b, h, c, Q)
    cs = torch.cumsum(log_a, dim=-1)
    xdt = xc * dc[..., None]

    same = to_end = from_start = chunk_same = None
    if seq_idx is not None:
        seg = segment_ids(seq_idx)
        seg = torch.cat([seg, seg[:, -1:].expand(batch, pad)], dim=1)
        segc = seg.reshape(batch, nc, Q)  # (b, c, Q); padding continues the last sequence
        last = segc[..., -1]  # (b, c)
        prev = torch.cat([torch.zeros_like(last[:, :1]), last[:, :-1]], dim=1)
        to_end = (segc == last[..., None]).to(cdt)[:, None]  # (b, 1, c, Q)
        from_start = (segc == prev[..., None]).to(cdt)[:, None]
        ends = torch.cat([torch.zeros_like(last[:, :1]), last], dim=1)  # (b, c+1)
        chunk_same = (ends[:, :, None] == ends[:, None, :])[:, None]  # (b, 1, c+1, c+1)
        same = (segc[..., :, None] == segc[..., None, :])[:, None]  # (b, 1, c, Q, Q)

    # 1. within chunks: y_i = sum_{j<=i} (C_i . B_j) exp(cs_i - cs_j) dt_j x_j
    decay = _segsum_decay(log_a, same)  # (b, h, c, Q, Q)
    scores = torch.einsum("bclhn,bcshn->bhcls", Cc, Bc) * decay
    y_diag = torch.einsum("bhcls,bcshp->bclhp", scores, xdt)

    # 2. each chunk's own contribution to the state at its end
    w_end = torch.exp(cs[..., -1:] - cs)
    w_end = w_end if to_end is None else w_end * to_end
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bc, w_end, xdt)

    # 3. across chunks: state entering chunk c = sum_{z<=c} decay(z -> c) * states[z]
    h0 = (
        initial_states.to(cdt)
        if initial_states is not None
        else torch.zeros(batch, nheads, headdim, dstate, dtype=cdt, device=x.device)
    )
    states = torch.cat([h0[:, None], states], dim=1)  # (b, c+1, h, p, n)
    chunk_decay = _segsum_decay(F.pad(cs[..., -1], (1, 0)), chunk_same)  # (b, h, c+1, c+1)
    entering = torch.einsum("bhzc,bchpn->bzhpn", chunk_decay, states)
    entering, final = entering[:, :-1], entering[:, -1]

    # 4. the carried state read out through C, decayed from the chunk start
    w_start = torch.exp(cs)
    w_start = w_start if from_start is None else w_start * from_start
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", Cc, entering, w_start)

    y = (y_diag + y_off).reshape(batch, nc * Q, nheads, headdim)[:, :L]
    out = _skip_and_gate(y, xx, D, z).to(x.dtype)
    return out, final.to(state_dtype(x.dtype))
