"""CPU realization of the SSD scan: the chunked form of README.md's Note [SSD chunked form] on
BLAS matmuls, forward and backward (Note [SSD chunked backward]).

Everything runs in the state dtype (float32; float64 for float64 inputs). Per chunk of Q steps:
C·Bᵀ (one matmul per group), masked by the decays and applied to dt·x (one per head); the chunk's
own state Bᵀ·(decayed dt·x) (one per group, all heads of the group as rows); a loop over chunks
carries the state (elementwise, (L/Q) steps); the carried state is read out through C (one
matmul per group). Nothing is quadratic in L: the largest temporaries are (Q x Q) per chunk and
head. The backward stores nothing but the inputs and recomputes the forward's pieces.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ssmscan.ops.common import cpu_lib
from ssmscan.ops.ssd_scan.common import process_dt, segment_ids, state_dtype


@dataclass
class _Pieces:
    """The forward's intermediates, chunked. b batch, c chunks, Q chunk, H heads, G groups,
    P headdim, N dstate; the state dtype throughout."""

    d: torch.Tensor  # (b, c, Q, H) time step after bias / softplus / clamp, 0 on padding
    xc: torch.Tensor  # (b, c, Q, H, P) x
    xdt: torch.Tensor  # (b, c, Q, H, P) dt * x
    Bg: torch.Tensor  # (b, c, G, Q, N)
    Cg: torch.Tensor  # (b, c, G, Q, N)
    decay: torch.Tensor  # (b, c, H, Q, Q) exp(cs_i - cs_j) where j <= i in one sequence, else 0
    CB: torch.Tensor  # (b, c, G, Q, Q) C_i . B_j
    w_start: torch.Tensor  # (b, c, Q, H) exp(cs_i), 0 where token i does not see the carry
    w_end: torch.Tensor  # (b, c, Q, H) exp(cs_last - cs_j), 0 where j does not reach the end
    carry: torch.Tensor  # (b, c, H) exp(cs_last), 0 where the sequence ends inside the chunk
    entering: torch.Tensor  # (b, c, H, P, N) state before each chunk
    final: torch.Tensor  # (b, H, P, N) state after the last chunk


def _pieces(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    Q: int,
) -> _Pieces:
    cdt = state_dtype(x.dtype)
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    nc = (L + Q - 1) // Q
    pad = nc * Q - L

    def chunked(t: torch.Tensor) -> torch.Tensor:  # (b, L, ...) -> (b, c, Q, ...), cdt
        t = t.to(cdt)  # a view when neither a cast nor padding is needed
        if pad:
            t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
        return t.reshape(b, nc, Q, *t.shape[2:])

    d = chunked(process_dt(dt, dt_bias, dt_softplus, dt_min, dt_max, cdt))
    xc = chunked(x)
    xdt = xc * d[..., None]
    Bg = chunked(B).transpose(2, 3).contiguous()
    Cg = chunked(C).transpose(2, 3).contiguous()
    cs = _log_decays(d, A)  # (b, c, H, Q) float64
    cs_last = cs[..., -1:]  # (b, c, H, 1)

    tril = torch.ones(Q, Q, dtype=torch.bool).tril()
    keep = tril
    masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    if seq_idx is not None:
        seg = segment_ids(seq_idx)
        seg = torch.cat([seg, seg[:, -1:].expand(b, pad)], dim=1).reshape(b, nc, Q)
        last = seg[..., -1]  # (b, c)
        prev = torch.cat([torch.zeros_like(last[:, :1]), last[:, :-1]], dim=1)
        keep = (tril & (seg[..., :, None] == seg[..., None, :]))[:, :, None]  # (b, c, 1, Q, Q)
        masks = (
            (seg == prev[..., None]).to(cdt)[..., None],  # (b, c, Q, 1) sees the carry
            (seg == last[..., None]).to(cdt)[..., None],  # (b, c, Q, 1) reaches the end
            (last == prev).to(cdt)[..., None],  # (b, c, 1) the carry goes through
        )

    decay = _decay_matrix(cs, keep, torch.empty(b, nc, H, Q, Q, dtype=cdt))
    CB = Cg @ Bg.transpose(-1, -2)
    w_start = torch.exp(cs).to(cdt).transpose(2, 3)
    w_end = torch.exp(cs_last - cs).to(cdt).transpose(2, 3)
    carry = torch.exp(cs_last[..., 0]).to(cdt)
    if masks is not None:
        w_start, w_end, carry = w_start * masks[0], w_end * masks[1], carry * masks[2]

    # each chunk's own state at its end: per group, (heads x P, Q) @ (Q, N),
    # written into states[:, c + 1]; then the carried state S_0 = initial,
    # S_{c+1} = carry_c S_c + local_c, in place (one op per chunk)
    xw = (xdt * w_end[..., None]).reshape(b, nc, Q, G, (H // G) * P).permute(0, 1, 3, 4, 2)
    states = torch.empty(b, nc + 1, H, P, N, dtype=cdt)
    if initial_states is not None:
        states[:, 0] = initial_states
    else:
        states[:, 0] = 0.0
    for i in range(b):
        torch.matmul(xw[i], Bg[i], out=states[i, 1:].view(nc, G, (H // G) * P, N))
    del xw
    for c in range(nc):
        states[:, c + 1].addcmul_(carry[:, c, :, None, None], states[:, c])
    entering, final = states[:, :nc], states[:, nc]
    return _Pieces(d, xc, xdt, Bg, Cg, decay, CB, w_start, w_end, carry, entering, final)


def _readout(p: _Pieces, H: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(y (b, c, Q, H, P) without the skip term, C·Sᵀ of the carried state (b, c, Q, H, P))."""
    b, nc, Q, _, P = p.xc.shape
    G = p.Bg.shape[2]
    M = (p.CB[:, :, :, None] * p.decay.reshape(b, nc, G, H // G, Q, Q)).reshape(b, nc, H, Q, Q)
    y_diag = (M @ p.xdt.transpose(2, 3)).transpose(2, 3)
    S = p.entering.reshape(b, nc, G, (H // G) * P, -1)
    CS = (p.Cg @ S.transpose(-1, -2)).reshape(b, nc, G, Q, H // G, P)
    CS = CS.permute(0, 1, 3, 2, 4, 5).reshape(b, nc, Q, H, P)
    return y_diag + CS * p.w_start[..., None], CS


def _skip(D: torch.Tensor | None, cdt: torch.dtype) -> torch.Tensor | None:
    if D is None:
        return None
    Dc = D.to(cdt)
    return Dc if D.dim() == 2 else Dc[:, None]


_SFX = {torch.float32: "f32", torch.float64: "f64"}

# chunks per block of the forward's output pass: its temporaries are a block's decay matrices
# and carried-state read-outs, about 1/4 of x's size at Q = P = 64 with 32 chunks
_BLOCK = 8


@functools.cache
def _intra_kernel(dtype: torch.dtype) -> Callable[..., None]:
    fn = getattr(cpu_lib.library(), f"ssd_intra_{_SFX[dtype]}")
    p, i = ctypes.c_void_p, ctypes.c_int64
    fn.argtypes = [p] * 3 + [i] * 5 + [p]
    fn.restype = None
    return fn


def _log_decays(d: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """(b, c, H, Q) float64 cumulative sums of dt * A within each chunk from d (b, c, Q, H).

    Float64 whatever the inputs: at strong decays (dt of a few units, A near -24) these sums
    reach thousands within a chunk, and a float32 difference cs_i - cs_j of two such sums keeps
    no digit of a decay near 1 (Note [SSD chunked form]). Every decay is taken as a float64
    difference, then rounded to the state dtype."""
    f64 = torch.float64
    return torch.cumsum(d.to(f64) * A.to(f64), dim=2).transpose(2, 3).contiguous()


def _decay_matrix(cs: torch.Tensor, keep: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """exp(cs_i - cs_j) where ``keep`` (Q, Q) or (b, c, 1, Q, Q), else 0, into ``out`` (b, c, H,
    Q, Q) in its dtype, from ``cs`` (b, c, H, Q) float64; the float64 differences are made a
    block of chunks of one batch row at a time."""
    for i in range(cs.shape[0]):
        for c0 in range(0, cs.shape[1], _BLOCK):
            c1 = min(cs.shape[1], c0 + _BLOCK)
            csb = cs[i, c0:c1]
            diff = csb[..., :, None] - csb[..., None, :]
            k = keep[i, c0:c1] if keep.dim() > 2 else keep
            out[i, c0:c1] = diff.masked_fill_(~k, float("-inf")).exp_()
    return out


def _intra_matrix(
    cs: torch.Tensor, dt: torch.Tensor, CB: torch.Tensor, H: int, G: int, Q: int
) -> torch.Tensor:
    """(k, H, Q, Q) in dt's dtype: exp(cs_i - cs_j) CB_g[i, j] dt_j on and below the diagonal, 0
    above, from cs (k, H, Q) float64, dt (k, H, Q) and CB (k, G, Q, Q), contiguous; the C kernel
    ``ssd_intra``."""
    k = cs.shape[0]
    M = torch.empty(k, H, Q, Q, dtype=dt.dtype)
    fn = _intra_kernel(dt.dtype)
    args = (cs.data_ptr(), dt.data_ptr(), CB.data_ptr(), H, G, Q)
    cpu_lib.run_ranges(
        lambda _, begin, end: fn(*args, begin, end, M.data_ptr()),
        k * H,
        cpu_lib.num_workers(k * H),
    )
    return M


def _seg_masks(
    seq_idx: torch.Tensor, b: int, nc: int, Q: int, pad: int, cdt: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Masks of packed sequences (Note [SSD chunked form]): (keep (b, c, 1, Q, Q) bool: j <= i in
    one sequence; sees the carry (b, c, Q, 1); reaches the end (b, c, Q, 1); the carry goes
    through (b, c, 1))."""
    seg = segment_ids(seq_idx)
    seg = torch.cat([seg, seg[:, -1:].expand(b, pad)], dim=1).reshape(b, nc, Q)
    last = seg[..., -1]
    prev = torch.cat([torch.zeros_like(last[:, :1]), last[:, :-1]], dim=1)
    tril = torch.ones(Q, Q, dtype=torch.bool).tril()
    keep = (tril & (seg[..., :, None] == seg[..., None, :]))[:, :, None]
    return (
        keep,
        (seg == prev[..., None]).to(cdt)[..., None],
        (seg == last[..., None]).to(cdt)[..., None],
        (last == prev).to(cdt)[..., None],
    )


def ssd_forward(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (b, L, H, P) in x's dtype, final_states (b, H, P, N) in the state dtype), both fresh
    and contiguous.

    The forward alone keeps no intermediate for a backward, so it works in place and in an order
    that holds few (Q = P = 64, N = 128) x-sized buffers at once: x is read through a view (never
    copied when no padding or cast is needed), dt is folded into the decay matrix's columns and
    the chunk states' weights instead of an x-sized dt·x, the decay matrix becomes C·Bᵀ ∘ decay
    ∘ dt in place, each chunk's own state is written straight into the buffer of carried states
    and the recurrence runs in place there, and the output is written once, skip term included.
    """
    cdt = state_dtype(x.dtype)
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    hg, Q = H // G, chunk_size
    if L == 0:
        final = (
            initial_states.to(cdt).clone()
            if initial_states is not None
            else torch.zeros(b, H, P, N, dtype=cdt)
        )
        return torch.empty(x.shape, dtype=x.dtype), final.contiguous()
    nc = (L + Q - 1) // Q
    pad = nc * Q - L

    def chunked(t: torch.Tensor) -> torch.Tensor:  # (b, L, ...) -> (b, c, Q, ...), cdt; a view
        t = t.to(cdt)  # when neither a cast nor padding is needed
        if pad:
            t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
        return t.reshape(b, nc, Q, *t.shape[2:])

    d = chunked(process_dt(dt, dt_bias, dt_softplus, dt_min, dt_max, cdt))  # (b, c, Q, H)
    xc = chunked(x)  # (b, c, Q, H, P)
    Bg = chunked(B).transpose(2, 3).contiguous()  # (b, c, G, Q, N)
    Cg = chunked(C).transpose(2, 3).contiguous()
    cs = _log_decays(d, A)  # (b, c, H, Q) float64
    cs_last = cs[..., -1:]
    w_start = torch.exp(cs).to(cdt)  # (b, c, H, Q)
    w_end = torch.exp(cs_last - cs).to(cdt)
    carry = torch.exp(cs_last[..., 0]).to(cdt)  # (b, c, H)
    keep: torch.Tensor | None = None
    if seq_idx is not None:
        keep, m_start, m_end, m_carry = _seg_masks(seq_idx, b, nc, Q, pad, cdt)
        w_start = w_start * m_start.transpose(2, 3)
        w_end = w_end * m_end.transpose(2, 3)
        carry = carry * m_carry

    # each chunk's own end state, sum_j w_end_j dt_j x_j B_jᵀ, per group (heads x P, Q) @ (Q, N),
    # written into states[:, c + 1]; then S_{c+1} += carry_c S_c in place, chunk after chunk
    states = torch.empty(b, nc + 1, H, P, N, dtype=cdt)
    if initial_states is not None:
        states[:, 0] = initial_states
    else:
        states[:, 0] = 0.0
    wd = (d.transpose(2, 3) * w_end).transpose(2, 3)  # (b, c, Q, H)
    xw = (xc * wd[..., None]).reshape(b, nc, Q, G, hg * P).permute(0, 1, 3, 4, 2)
    for i in range(b):
        torch.matmul(xw[i], Bg[i], out=states[i, 1:].view(nc, G, hg * P, N))
    del xw
    for c in range(nc):
        states[:, c + 1].addcmul_(carry[:, c, :, None, None], states[:, c])
    final = states[:, nc].clone()

    # the output, in place, a block of chunks of one batch row at a time (temporaries of a block
    # only): within chunks y_i = sum_j (C_i . B_j) decay_ij dt_j x_j, the decay matrix built in
    # place and applied per chunk and head; then y_i += w_start_i C_i S_cᵀ per group
    direct = pad == 0 and z is None and x.dtype == cdt
    y = torch.empty(b, nc * Q, H, P, dtype=cdt)  # (b, c, Q, H, P) as chunks
    yc = y.view(b, nc, Q, H, P)
    S = states[:, :nc].view(b, nc, G, hg * P, N)
    dh = d.transpose(2, 3).contiguous()  # (b, c, H, Q)
    ws = w_start.view(b, nc, G, hg, Q).transpose(3, 4)[..., None]  # (b, c, G, Q, hg, 1)
    for i in range(b):
        for c0 in range(0, nc, _BLOCK):
            c1 = min(nc, c0 + _BLOCK)
            k = c1 - c0
            CB = Cg[i, c0:c1] @ Bg[i, c0:c1].transpose(-1, -2)  # (k, G, Q, Q)
            if keep is None:  # the C kernel: one pass
                Mb = _intra_matrix(cs[i, c0:c1], dh[i, c0:c1], CB, H, G, Q)
            else:
                csb = cs[i, c0:c1]  # (k, H, Q) float64
                diff = csb[..., :, None] - csb[..., None, :]  # (k, H, Q, Q)
                Mb = diff.masked_fill_(~keep[i, c0:c1], float("-inf")).exp_().to(cdt)
                Mb.view(k, G, hg, Q, Q).mul_(CB[:, :, None])
                Mb.mul_(dh[i, c0:c1, :, None, :])
            for c in range(c0, c1):
                torch.bmm(Mb[c - c0], xc[i, c].transpose(0, 1), out=yc[i, c].transpose(0, 1))
            CS = Cg[i, c0:c1] @ S[i, c0:c1].transpose(-1, -2)  # (k, G, Q, hg * P)
            yg = yc[i, c0:c1].view(k, Q, G, hg, P).transpose(1, 2)
            yg.addcmul_(CS.view(k, G, Q, hg, P), ws[i, c0:c1])
    del states, S

    Dh = _skip(D, cdt)
    if direct:  # y is the output: add the skip term in place
        if Dh is not None:
            y.addcmul_(Dh, x)
        return y, final
    yt = y[:, :L]
    if Dh is not None:
        yt = torch.addcmul(yt, Dh, x.to(cdt))
    if z is not None:
        yt = yt * F.silu(z.to(cdt))
    out = torch.empty(x.shape, dtype=x.dtype)
    out.copy_(yt)
    return out, final


def ssd_backward(
    dout: torch.Tensor,
    dfinal_states: torch.Tensor | None,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    seq_idx: torch.Tensor | None,
    dt_softplus: bool,
    dt_min: float,
    dt_max: float,
    chunk_size: int,
) -> dict[str, torch.Tensor]:
    """Gradients in the state dtype, keyed by argument name (those of the optional arguments
    only when given). Note [SSD chunked backward] in README.md derives each line."""
    cdt = state_dtype(x.dtype)
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    hg, Q = H // G, chunk_size
    if L == 0:
        zero = {
            k: torch.zeros(t.shape, dtype=cdt) for k, t in dict(x=x, dt=dt, A=A, B=B, C=C).items()
        }
        for k, t in dict(D=D, z=z, dt_bias=dt_bias).items():
            if t is not None:
                zero[k] = torch.zeros(t.shape, dtype=cdt)
        if initial_states is not None:
            zero["initial_states"] = (
                dfinal_states.to(cdt)
                if dfinal_states is not None
                else torch.zeros(initial_states.shape, dtype=cdt)
            )
        return zero
    p = _pieces(x, dt, A, B, C, dt_bias, initial_states, seq_idx, dt_softplus, dt_min, dt_max, Q)
    nc = p.d.shape[1]
    pad = nc * Q - L
    grads: dict[str, torch.Tensor] = {}
    Dh = _skip(D, cdt)
    xf = x.to(cdt)

    # gate and skip: y = y_ssd + D x; out = y * silu(z)
    g = dout.to(cdt)
    CS = None
    if z is not None:  # the gate needs y: recompute it (without z, y is never needed)
        y_ssd, CS = _readout(p, H)
        y = y_ssd.reshape(b, -1, H, P)[:, :L]
        if Dh is not None:
            y = y + Dh * xf
        zf = z.to(cdt)
        sig = torch.sigmoid(zf)
        grads["z"] = g * y * sig * (1 + zf * (1 - sig))
        g = g * zf * sig
    dx = g * Dh if Dh is not None else torch.zeros_like(xf)
    if D is not None:
        gx = (g * xf).sum(dim=(0, 1))
        grads["D"] = gx if D.dim() == 2 else gx.sum(-1)
    gc = (F.pad(g, (0, 0, 0, 0, 0, pad)) if pad else g).reshape(b, nc, Q, H, P)

    # read-out of the carried state: y_i += w_start_i * C_i S_c^T
    gw = (gc * p.w_start[..., None]).reshape(b, nc, Q, G, hg * P).transpose(2, 3)  # (b,c,G,Q,hgP)
    # dS_out_c, the read-out's gradient of the state entering chunk c, written into dstates[:, c]
    dstates = torch.empty(b, nc + 1, H, P, N, dtype=cdt)
    for i in range(b):
        torch.matmul(gw[i].transpose(-1, -2), p.Cg[i], out=dstates[i, :nc].view(nc, G, hg * P, N))
    if CS is not None:  # C S^T at hand: dw_start from it, dC with all heads of a group as K
        dw_start = (gc * CS).sum(-1)  # (b, c, Q, H)
        dC = gw @ p.entering.reshape(b, nc, G, hg * P, N)  # (b, c, G, Q, N)
    else:  # one product per head, g S, serves both (Note [SSD chunked backward])
        # chunk by chunk: T is (H, Q, N), twice x's size over all chunks
        gh = gc.transpose(2, 3)  # (b, c, H, Q, P), a view
        w = p.w_start.transpose(2, 3).reshape(b, nc, G, hg, Q, 1)
        dw_start = torch.empty(b, nc, G, hg, Q, dtype=cdt)
        dC = torch.empty(b, nc, G, Q, N, dtype=cdt)
        T = torch.empty(H, Q, N, dtype=cdt)
        Tg = T.view(G, hg, Q, N)
        for i in range(b):
            for c in range(nc):
                torch.bmm(gh[i, c], p.entering[i, c], out=T)
                torch.sum(Tg * p.Cg[i, c, :, None], -1, out=dw_start[i, c])
                torch.sum(Tg * w[i, c], 1, out=dC[i, c])
        dw_start = dw_start.reshape(b, nc, H, Q).transpose(2, 3)

    # the loop over chunks, backwards, in place: S_{c+1} = carry_c S_c + local_c
    if dfinal_states is not None:
        dstates[:, nc] = dfinal_states
    else:
        dstates[:, nc] = 0.0
    for c in range(nc - 1, -1, -1):
        dstates[:, c].addcmul_(p.carry[:, c, :, None, None], dstates[:, c + 1])
    if initial_states is not None:
        grads["initial_states"] = dstates[:, 0].clone()

    # each chunk's own state: local = (xdt * w_end)^T B per group; dlocal_c = dstates[:, c + 1]
    # and dcarry_c = dS_{c+1} . S_c, per batch row (its chunks' states are contiguous)
    xw = (p.xdt * p.w_end[..., None]).reshape(b, nc, Q, G, hg * P).transpose(2, 3)
    dcarry = torch.empty(b, nc, H, dtype=cdt)
    dB = torch.empty(b, nc, G, Q, N, dtype=cdt)
    dxw_g = torch.empty(b, nc, G, Q, hg * P, dtype=cdt)
    dl = ent = dxw_g  # bound even for an empty batch
    for i in range(b):
        dl = dstates[i, 1:].view(nc, G, hg * P, N)
        ent = p.entering[i].reshape(nc * H, P * N, 1)
        torch.bmm(dl.view(nc * H, 1, P * N), ent, out=dcarry[i].view(nc * H, 1, 1))
        torch.matmul(xw[i], dl, out=dB[i])
        torch.matmul(p.Bg[i], dl.transpose(-1, -2), out=dxw_g[i])
    # the states and their gradients are not needed below: release them (the largest buffers)
    del dstates, dl, ent, xw
    p.entering = p.final = torch.empty(0, dtype=cdt)
    dxw = dxw_g.transpose(2, 3).reshape(b, nc, Q, H, P)
    del dxw_g
    dw_end = (dxw * p.xdt).sum(-1)  # (b, c, Q, H)

    # within chunks: y_i += sum_j CB_ij decay_ij xdt_j
    M = (p.CB[:, :, :, None] * p.decay.reshape(b, nc, G, hg, Q, Q)).reshape(b, nc, H, Q, Q)
    gh = gc.transpose(2, 3)  # (b, c, H, Q, P), views
    xh = p.xdt.transpose(2, 3)
    dxdt = torch.empty(b, nc, Q, H, P, dtype=cdt)
    dxh = dxdt.transpose(2, 3)
    dM = torch.empty(b, nc, H, Q, Q, dtype=cdt)
    for i in range(b):  # per chunk: strided operands and results without copies
        for c in range(nc):
            torch.bmm(M[i, c].transpose(-1, -2), gh[i, c], out=dxh[i, c])
            torch.bmm(gh[i, c], xh[i, c].transpose(-1, -2), out=dM[i, c])
    dxdt.addcmul_(dxw, p.w_end[..., None])
    del dxw
    dlog = dM * M
    dCB = (dM * p.decay).reshape(b, nc, G, hg, Q, Q).sum(3)
    dC = dC + dCB @ p.Bg
    dB = dB + dCB.transpose(-1, -2) @ p.Cg

    # the log-decays cs = cumsum(dt * A) within the chunk. da_k, the gradient of the k-th
    # increment, sums each term that contains it directly: the decay matrix over the pairs
    # j < k <= i, w_start over i >= k, w_end over i < k, the carry always. (Summing gradients
    # of cs and then their reverse cumsum gives the same in exact arithmetic, as differences of
    # large sums that float32 loses at strong decays.)
    R = dlog.cumsum(-1)  # (b, c, H, Q, Q): R[i, m] = sum_{j <= m} dlog_ij
    del dlog
    R.masked_fill_(~torch.ones(Q, Q, dtype=torch.bool).tril(-1), 0.0)  # keep i > m
    pairs = R.sum(-2).transpose(2, 3)  # (b, c, Q, H): [m] = sum over j <= m < i
    del R
    da = (dw_start * p.w_start).flip(2).cumsum(2).flip(2)  # (b, c, Q, H), i >= k
    da[:, :, 1:] += pairs[:, :, :-1] + (dw_end * p.w_end).cumsum(2)[:, :, :-1]  # j < k <= i; i < k
    da += (dcarry * p.carry)[:, :, None]
    Af = A.to(cdt)
    grads["A"] = (da * p.d).sum(dim=(0, 1, 2))
    dd = da * Af + (dxdt * p.xc).sum(-1)  # (b, c, Q, H)
    dx = dx + (dxdt * p.d[..., None]).reshape(b, -1, H, P)[:, :L]
    grads["x"] = dx
    dd = dd.reshape(b, -1, H)[:, :L]

    # the time step: clamp(softplus(dt + dt_bias))
    pre = dt.to(cdt)
    if dt_bias is not None:
        pre = pre + dt_bias.to(cdt)
    post = F.softplus(pre) if dt_softplus else pre
    dd = torch.where((post < dt_min) | (post > dt_max), torch.zeros_like(dd), dd)
    if dt_softplus:
        dd = torch.where(pre <= 20.0, dd * torch.sigmoid(pre), dd)
    grads["dt"] = dd
    if dt_bias is not None:
        grads["dt_bias"] = dd.sum(dim=(0, 1))

    def ungroup(t: torch.Tensor) -> torch.Tensor:  # (b, c, G, Q, N) -> (b, L, G, N)
        return t.transpose(2, 3).reshape(b, nc * Q, G, N)[:, :L]

    grads["B"], grads["C"] = ungroup(dB), ungroup(dC)
    return grads
