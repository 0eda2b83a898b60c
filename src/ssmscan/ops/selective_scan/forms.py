"""mamba-ssm's other argument forms, rewritten into the op's.

``ssmscan::selective_scan_fwd`` and its realizations take a real A (dim, N) and B / C that vary in
time, (batch, N, L) or grouped (batch, G, N, L). mamba-ssm's ``selective_scan_fn`` also accepts,
and S4D-style layers use:

* a time-invariant B or C, (dim, N), each on its own (B may vary and C not, and so on);
* a complex A (dim, N) (complex64), with complex B and C: a time-invariant one is complex (dim, N),
  a variable one is real (batch, N, 2L) or (batch, G, N, 2L) holding step t's real and imaginary
  parts at 2t and 2t + 1.

``ssmscan.selective_scan`` rewrites both into the op's form with plain torch ops (so autograd,
``torch.compile`` and ``torch.export`` see through the rewrite, and every realization, the export
decompositions included, runs it); the realizations themselves refuse these forms with an error
(``checks.check_canonical_forms``).

Cost: a time-invariant B or C becomes per-channel, B and C (batch, dim, N, L) (G = dim): the
kernels copy B and C into their own layout anyway, but with G = dim that copy is dim / G times the
grouped one and the GPU kernels run one channel per block of channels (Note [complex A] below for
the complex form, which is per-channel as well and has 2N real states). Measured on an H200
(torch 2.11, Triton 3.6, 2026-12-05), forward, bf16, batch 4, dim 512, L 2048: B / C
(batch, 32, L) 0.144 ms, peak 286 MiB; B time-invariant (dim, 32) 1.51 ms, peak 2.3 GiB; complex
A with 16 states (B (batch, 16, 2L), C time-invariant) 8.3 ms, peak 811 MiB. Dedicated kernels
(a per-channel B / C read in the kernel, a complex scan) would remove those costs.

Note [complex A]
----------------
Semantics (mamba-ssm's ``selective_scan_ref``): with A = a + i w complex, the state h is complex,

    h_t = exp(dt_t * A) * h_{t-1} + dt_t * B_t * u_t,      y_t = 2 * Re(sum_n C_t[n] * h_t[n])

(the factor 2 counts each state's conjugate twin, as S4D's conjugate pairs do); D, z, delta_bias
and the softplus as in the real scan, D added after the doubling.

The rotating frame turns it into a real scan with 2N states. With S_t = dt_0 + ... + dt_t and
phase theta_t = w * S_t, let g_t = exp(-i theta_t) h_t (g_{-1} = h_{-1}). Then

    g_t = exp(dt_t * a) * g_{t-1} + dt_t * (exp(-i theta_t) B_t) * u_t

whose decay exp(dt_t a) is real: Re g and Im g are two real states of one selective scan with
A' = [a, a] (dim, 2N), B' = [Re B~, Im B~] with B~_t = exp(-i theta_t) B_t, and, since
2 Re(C_t h_t) = 2 Re(C~_t g_t) with C~_t = exp(i theta_t) C_t, C' = [2 Re C~, -2 Im C~]. The last
state is h = exp(i theta_{L-1}) g_{L-1}. B' and C' depend on the channel through theta, so they are
per-channel (batch, dim, 2N, L) in the state dtype.

Precision: theta grows with t, so it is computed in float64 (S by a float64 cumulative sum) and
only its cosine and sine are rounded to the state dtype; each B~_t, C~_t is then exact to that
dtype, and the scan's own rounding is the real scan's. The gradient of w (and through S, of dt)
gathers sum_t S_t * (...) terms that cancel down to the size of the decay window, so its error
grows with the phase range: measured in fp32 against float64 (w up to 2 pi plus noise, CPU
kernel), dA 1.0e-6 and ddelta_bias 2.6e-6 at L = 1000 with Mamba's dt (up to 0.1), 6.2e-6 and
5.2e-6 at L = 4000; with dt uniform in [0, 1], dA 1.5e-5 at L = 1100 and 3.8e-5 at L = 2000,
past fp32's tolerance (1e-5). So a static length runs in frames of ``FRAME_LEN`` steps, each frame
one real scan whose phase starts from zero, the complex state carried between frames (``h`` of
one frame the ``initial_state`` of the next): the errors stay those of one frame at any length,
for L / FRAME_LEN calls of the op. A symbolic length (dynamic-shape export or compile) runs as
one frame, where forward results keep their precision and only gradients at long lengths lose
some, as measured above. With frames (256 steps): dA 4.7e-6 at L = 1100 with dt in [0, 1]
(``test_mamba_ssm_forms.py::test_cpu_complex_gradients_hold_past_one_frame``), 1.4e-6 at
L = 4000 with Mamba's dt.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ssmscan.ops.selective_scan.shapes import state_dtype

# Steps of one complex-A frame (Note [complex A]); a multiple of the op's CHECKPOINT_LEN.
FRAME_LEN = 256

# run(u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus) -> (out, last_state):
# the op (or its eager fast path) on arguments in the op's form.
Run = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def is_op_form(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> bool:
    """Whether ``A``, ``B``, ``C`` are already in the op's form: real A, time-varying B and C."""
    return not A.is_complex() and B.dim() != 2 and C.dim() != 2


def selective_scan_forms(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    delta_softplus: bool,
    initial_state: torch.Tensor | None,
    run: Run,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The selective scan of mamba-ssm's argument forms through ``run`` on the op's form.

    Args:
        u, delta, z: (batch, dim, L).
        A: (dim, N), float32 or complex64 (float64 / complex128 for float64 ``u``).
        B, C: each (batch, N, L), (batch, G, N, L) or time-invariant (dim, N); with complex A a
            time-invariant one is complex and a variable one real (batch, N, 2L) or
            (batch, G, N, 2L) (Note [complex A]). Already checked
            (``check_selective_scan_args(..., mamba_forms=True)``).
        D, delta_bias: optional (dim,), real.
        delta_softplus: apply softplus to ``delta + delta_bias``.
        initial_state: optional (batch, dim, N), complex for complex A.
        run: runs the op's form, ``run(u, delta, A, B, C, D, z, delta_bias, initial_state,
            delta_softplus) -> (out, last_state)``.

    Returns:
        ``(out, last_state)``: out (batch, dim, L) in ``u``'s dtype; last_state (batch, dim, N) in
        the state dtype, complex (complex64, complex128 for float64 ``u``) for complex A.

    Example:
        >>> import torch
        >>> from ssmscan.ops.selective_scan.reference import selective_scan_reference
        >>> def run(u, delta, A, B, C, D, z, bias, h0, sp):
        ...     return selective_scan_reference(u, delta, A, B, C, D, z, bias, sp, True, h0)
        >>> u, dt = torch.randn(1, 4, 5), torch.rand(1, 4, 5) * 0.1
        >>> A, B, C = -torch.rand(4, 2), torch.randn(4, 2), torch.randn(1, 2, 5)
        >>> out, last = selective_scan_forms(u, dt, A, B, C, None, None, None, False, None, run)
        >>> ref = selective_scan_reference(u, dt, A, B, C)
        >>> bool(torch.allclose(out, ref, atol=1e-6))
        True
    """
    batch, dim, L = u.shape
    sdt = state_dtype(u.dtype)
    if A.is_complex():
        return _complex_scan_framed(
            u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, run
        )  # fmt: skip
    # a time-invariant one in the state dtype (the op takes B / C in u's or the state dtype)
    Bc = _per_channel(B.to(sdt) if B.dim() == 2 else B, batch, dim, L)
    Cc = _per_channel(C.to(sdt) if C.dim() == 2 else C, batch, dim, L)
    return run(u, delta, A, Bc, Cc, D, z, delta_bias, initial_state, delta_softplus)


def _per_channel(X: torch.Tensor, batch: int, dim: int, L: int) -> torch.Tensor:
    """B or C, (dim, N), (batch, N, L) or (batch, G, N, L) -> (batch, dim, N, L): an expanded
    view, except for G > 1 (a copy)."""
    if X.dim() == 2:
        return X[None, :, :, None].expand(batch, dim, X.shape[1], L)
    N = X.shape[-2]
    if X.dim() == 3:
        return X[:, None].expand(batch, dim, N, L)
    return X.repeat_interleave(dim // X.shape[1], dim=1)


def _parts(
    X: torch.Tensor, batch: int, dim: int, L: int, sdt: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Real and imaginary parts of a complex-A B or C as (batch, dim, N, L) tensors in ``sdt``
    (expanded views where they can be): a time-invariant one is complex (dim, N), a variable one
    real with (real, imaginary) interleaved along its last dimension of 2L."""
    if X.dim() == 2:
        re, im = X.real.to(sdt), X.imag.to(sdt)
        return _per_channel(re, batch, dim, L), _per_channel(im, batch, dim, L)
    Xs = X.to(sdt)
    return _per_channel(Xs[..., 0::2], batch, dim, L), _per_channel(Xs[..., 1::2], batch, dim, L)


def _complex_scan_framed(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    delta_softplus: bool,
    initial_state: torch.Tensor | None,
    run: Run,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Complex A over frames of ``FRAME_LEN`` steps, the complex state carried from one to the
    next, each frame's phase counted from its own start (Note [complex A]: bounded phases keep
    the gradients of A and dt at the tolerance of the state dtype at any static length). A
    symbolic length runs as one frame."""
    L = u.shape[2]
    if not isinstance(L, int) or L <= FRAME_LEN:
        return _complex_scan(
            u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, run
        )  # fmt: skip

    def steps(X: torch.Tensor | None, lo: int, hi: int, per_step: int = 1) -> torch.Tensor | None:
        if X is None or X.dim() == 2:
            return X
        return X[..., per_step * lo : per_step * hi]

    outs: list[torch.Tensor] = []
    h = initial_state
    for lo in range(0, L, FRAME_LEN):
        hi = min(lo + FRAME_LEN, L)
        Bf, Cf = steps(B, lo, hi, 2), steps(C, lo, hi, 2)
        assert Bf is not None and Cf is not None  # B, C are tensors
        out, last = _complex_scan(
            u[..., lo:hi], delta[..., lo:hi], A, Bf, Cf, D, steps(z, lo, hi), delta_bias,
            delta_softplus, h, run,
        )  # fmt: skip
        outs.append(out)
        h = last
    return torch.cat(outs, dim=-1), last


def _complex_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    delta_softplus: bool,
    initial_state: torch.Tensor | None,
    run: Run,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Complex A as a real scan of 2N states in the rotating frame (Note [complex A])."""
    batch, dim, L = u.shape
    N = A.shape[1]
    sdt = state_dtype(u.dtype)
    # the phase in float64: theta (batch, dim, N, L) = w * cumsum(dt)
    dt = delta.to(torch.float64)
    if delta_bias is not None:
        dt = dt + delta_bias.to(torch.float64)[:, None]
    if delta_softplus:
        dt = F.softplus(dt)
    theta = A.imag.to(torch.float64)[None, :, :, None] * dt.cumsum(-1)[:, :, None, :]
    cos, sin = theta.cos().to(sdt), theta.sin().to(sdt)
    b_re, b_im = _parts(B, batch, dim, L, sdt)
    c_re, c_im = _parts(C, batch, dim, L, sdt)
    # B~ = exp(-i theta) B, C~ = exp(i theta) C; B' = [Re B~, Im B~], C' = [2 Re C~, -2 Im C~]
    Bp = torch.cat((cos * b_re + sin * b_im, cos * b_im - sin * b_re), dim=2)
    Cp = torch.cat((2 * (cos * c_re - sin * c_im), -2 * (sin * c_re + cos * c_im)), dim=2)
    a = A.real
    Ap = torch.cat((a, a), dim=1)
    h0 = None
    if initial_state is not None:
        h0 = torch.cat((initial_state.real, initial_state.imag), dim=-1).to(sdt)
    out, last = run(u, delta, Ap, Bp, Cp, D, z, delta_bias, h0, delta_softplus)
    g = torch.complex(last[..., :N], last[..., N:])
    if L == 0:
        return out, g
    end = theta[..., L - 1]
    return out, g * torch.complex(end.cos().to(sdt), end.sin().to(sdt))
