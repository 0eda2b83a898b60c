"""Sequential, readable selective scan: the oracle every fast path is tested against.

Never imports a fast path. Computes in ``compute_dtype`` (float64 for exact comparisons).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ssmscan.ops.selective_scan.shapes import state_dtype


def selective_scan_reference(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    initial_state: torch.Tensor | None = None,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Selective scan, one timestep at a time.

    For batch b, channel d, state n, time t::

        dt_t  = softplus(delta_t + delta_bias)        (bias and softplus optional)
        h_t   = exp(dt_t * A[d, n]) * h_{t-1} + dt_t * B_t[n] * u_t
        y_t   = sum_n C_t[n] * h_t[n] + D[d] * u_t
        out_t = y_t * silu(z_t)                        (z optional)

    The argument forms are mamba-ssm's (``selective_scan_ref``): B and C each either vary in time
    or are time-invariant (dim, N); A may be complex (S4D-style), in which case the state is
    complex and ``y_t = 2 * Re(sum_n C_t[n] * h_t[n])`` (Note [complex A] in
    :mod:`ssmscan.ops.selective_scan.forms`).

    Args:
        u, delta, z: (batch, dim, L).
        A: (dim, N), real or complex.
        B, C: each (batch, N, L), grouped (batch, G, N, L) (channel d uses group d // (dim // G))
            or time-invariant (dim, N). With complex A: a time-invariant one is complex; a
            variable one is real (batch, N, 2L) or (batch, G, N, 2L), step t's real and
            imaginary parts at 2t and 2t + 1.
        D, delta_bias: (dim,), real.
        initial_state: (batch, dim, N), h_{-1} (complex for complex A); zeros when None.
        compute_dtype: dtype of all real arithmetic (the complex one has parts of it); default
            float64 for float64 ``u``, else float32.

    Returns:
        ``out`` (batch, dim, L) in ``u``'s dtype, and with ``return_last_state`` also ``h_{L-1}``
        (batch, dim, N) in the state dtype (float64 for float64 ``u``, else float32; complex128 /
        complex64 for complex A).

    Example:
        >>> import torch
        >>> u, dt = torch.randn(1, 4, 5), torch.rand(1, 4, 5) * 0.1
        >>> A, B, C = -torch.rand(4, 2), torch.randn(1, 2, 5), torch.randn(1, 2, 5)
        >>> selective_scan_reference(u, dt, A, B, C).shape
        torch.Size([1, 4, 5])
        >>> A = torch.complex(-0.5 * torch.ones(4, 2), torch.arange(2.0).expand(4, 2))
        >>> B = torch.randn(1, 2, 10)  # complex and variable: 5 steps of (real, imaginary)
        >>> C = torch.randn(4, 2, dtype=torch.complex64)  # time-invariant
        >>> out, last = selective_scan_reference(u, dt, A, B, C, return_last_state=True)
        >>> out.dtype, last.dtype
        (torch.float32, torch.complex64)
    """
    cdt = compute_dtype or state_dtype(u.dtype)
    batch, dim, L = u.shape
    N = A.shape[1]
    is_complex = A.is_complex()
    wdt = complex_dtype(cdt) if is_complex else cdt  # dtype of A, B, C and the state
    uu, dd, AA = u.to(cdt), delta.to(cdt), A.to(wdt)
    if delta_bias is not None:
        dd = dd + delta_bias.to(cdt)[:, None]
    if delta_softplus:
        dd = F.softplus(dd)
    BB, CC = _per_channel(B, batch, dim, N, L, wdt), _per_channel(C, batch, dim, N, L, wdt)

    if initial_state is not None:
        h = initial_state.to(wdt).clone()
    else:
        h = torch.zeros(batch, dim, N, dtype=wdt, device=u.device)
    ys = []
    for t in range(L):
        dt = dd[:, :, t, None]  # (batch, dim, 1)
        h = torch.exp(dt * AA) * h + dt * BB[..., t] * uu[:, :, t, None]
        y = (h * CC[..., t]).sum(-1)
        ys.append(2 * y.real if is_complex else y)  # Note [complex A]
    y = torch.stack(ys, dim=-1) if L > 0 else uu.new_zeros(batch, dim, 0)
    if D is not None:
        y = y + D.to(cdt)[:, None] * uu
    if z is not None:
        y = y * F.silu(z.to(cdt))
    out = y.to(u.dtype)
    if return_last_state:
        sdt = state_dtype(u.dtype)
        return out, h.to(complex_dtype(sdt) if is_complex else sdt)
    return out


def complex_dtype(real: torch.dtype) -> torch.dtype:
    """The complex dtype whose parts are ``real`` (float32 -> complex64, float64 -> complex128)."""
    return torch.complex128 if real == torch.float64 else torch.complex64


def _per_channel(
    X: torch.Tensor, batch: int, dim: int, N: int, L: int, wdt: torch.dtype
) -> torch.Tensor:
    """B or C in any accepted form as one (batch, dim, N, L) tensor (a view where it can be) of
    ``wdt``: group g serves dim // G consecutive channels; a time-invariant (dim, N) one is the
    same at every step and in every batch; for complex ``wdt`` a variable one is real with its
    steps interleaved (real, imaginary) along the last dimension (Note [complex A])."""
    if X.dim() == 2:
        return X.to(wdt)[None, :, :, None].expand(batch, dim, N, L)
    if wdt.is_complex:
        parts = X.to(torch.float64 if wdt == torch.complex128 else torch.float32)
        X = torch.complex(parts[..., 0::2], parts[..., 1::2])
    X = X.to(wdt)
    if X.dim() == 3:
        return X[:, None].expand(batch, dim, N, L)
    return X.repeat_interleave(dim // X.shape[1], dim=1)
