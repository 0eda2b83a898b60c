"""The output contract of ``ssmscan::selective_scan_fwd``: shapes, dtypes and strides every
realization returns and every fake allocates.

Outputs are always freshly allocated and contiguous, whatever the strides of the inputs:

* ``out``          (batch, dim, L), dtype of ``u``
* ``last_state``   (batch, dim, N), the state dtype (float64 for float64 ``u``, else float32)
* ``checkpoints``  (batch, dim, ceil(L / CHECKPOINT_LEN) + 1, N), state dtype: entry c is the
  state *before* chunk c of ``CHECKPOINT_LEN`` steps (entry 0 is the initial state), the last entry
  the final state. The backward recomputes the states inside a chunk from these, so the
  (batch, dim, N, L) state tensor is never stored. (The extra final entry also keeps this size
  from ever being 1 for L >= 1: a size-1 dimension makes symbolic-shape tracing guard on
  L <= CHECKPOINT_LEN, which would split dynamic-L exports and compiles at that length.)

Note [long sums]
----------------
dA, dD and ddelta_bias are sums over every step of L (and over batch). Summed in one fp32
accumulator per channel, the rounding error grows with the number of terms: at L = 2^20 + 37 the
C kernel's fp32 dA was 2.3e-5 and dD 2.1e-5 off float64 (max-normalized), above the fp32
tolerance of 1e-5. So every backward sums in two levels: the steps of one chunk
(``CHECKPOINT_LEN``) into a chunk sum, the chunk sums into the total (dA 1.1e-6, dD 5.8e-7 at that
length). The C kernel keeps both levels in registers; the Triton kernels, short of registers,
fold each chunk's sums into their program's partial in device memory (stored and loaded back by
the same thread) and restart the chunk accumulators from zero.
``tests/ops/selective_scan/test_long_sequences.py`` checks it at 2^20 + 37 steps on the CPU and,
on a GPU, every Triton backward.
"""

from __future__ import annotations

import torch

CHECKPOINT_LEN = 256


def state_dtype(u_dtype: torch.dtype) -> torch.dtype:
    """Accumulation and state dtype for inputs of ``u_dtype``."""
    return torch.float64 if u_dtype == torch.float64 else torch.float32


def num_checkpoints(L: int | torch.SymInt) -> int | torch.SymInt:
    """Entries along the checkpoint dimension: one per chunk, plus the final state."""
    return (L + CHECKPOINT_LEN - 1) // CHECKPOINT_LEN + 1


def empty_forward_outputs(
    u: torch.Tensor, A: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Allocate (out, last_state, checkpoints) for inputs shaped like ``u`` (batch, dim, L)
    and ``A`` (dim, N). Used by the fakes and by every real realization."""
    batch, dim, L = u.shape
    N = A.shape[1]
    sdt = state_dtype(u.dtype)
    out = torch.empty((batch, dim, L), dtype=u.dtype, device=u.device)
    last = torch.empty((batch, dim, N), dtype=sdt, device=u.device)
    ckpt = torch.empty((batch, dim, num_checkpoints(L), N), dtype=sdt, device=u.device)
    return out, last, ckpt


def empty_backward_outputs(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]
]:
    """Allocate the gradients: one contiguous tensor per differentiable input, with that input's
    shape and dtype. The optional inputs' gradients come as a list, in argument order
    (D, z, delta_bias, initial_state), holding only those that were given."""

    def like(t: torch.Tensor) -> torch.Tensor:
        return torch.empty(t.shape, dtype=t.dtype, device=t.device)

    optional = [like(t) for t in (D, z, delta_bias, initial_state) if t is not None]
    return like(u), like(delta), like(A), like(B), like(C), optional
