"""Triton kernel of ``ssmscan::linear_scan_fwd`` (CUDA): h_t = a_t h_{t-1} + b_t.

The op hands over time-major (L, M) contiguous tensors in the compute dtype. Every program owns
BLOCK_M independent columns and walks time sequentially: each step is one coalesced row load of a
and b, one FMA per element and one coalesced store, so the kernel runs at memory speed with no
cross-thread scan (latency is covered by the many programs in flight).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ssmscan.ops.common.device import DeviceFacts, device_facts
from ssmscan.ops.common.host_math import cdiv
from ssmscan.ops.common.triton_launch import launcher


@triton.jit
def _linear_scan_fwd_kernel(
    a,  # (L, M) decays, compute dtype
    b,  # (L, M) inputs, compute dtype
    init,  # (M,) initial state, or None
    out,  # (L, M) states, compute dtype
    L,  # time steps
    M,  # independent columns
    REVERSE: tl.constexpr,  # scan from t = L - 1 down to 0
    HAS_INIT: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    i_m = tl.program_id(0)
    o_m = i_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    m_m = o_m < M
    if HAS_INIT:
        h = tl.load(init + o_m, mask=m_m, other=0.0).to(out.dtype.element_ty)
    else:
        h = tl.zeros((BLOCK_M,), dtype=out.dtype.element_ty)
    for s in range(0, L):
        if REVERSE:
            t = L - 1 - s
        else:
            t = s
        o = t.to(tl.int64) * M + o_m
        b_a = tl.load(a + o, mask=m_m, other=0.0)
        b_b = tl.load(b + o, mask=m_m, other=0.0)
        h = b_a * h + b_b
        tl.store(out + o, h, mask=m_m)


def block_columns(M: int, facts: DeviceFacts) -> int:
    """Columns per program: the widest block that still leaves two programs per multiprocessor
    (one at 256 columns), so that many programs are in flight to cover the loads' latency.

    Example:
        >>> from ssmscan.ops.common.device import H200
        >>> block_columns(1 << 20, H200), block_columns(40000, H200), block_columns(1000, H200)
        (1024, 256, 128)
    """
    if M >= 1024 * 2 * facts.sm_count:
        return 1024
    return 256 if M >= 256 * facts.sm_count else 128


def launch(
    a: torch.Tensor,
    b: torch.Tensor,
    initial: torch.Tensor | None,
    out: torch.Tensor,
    reverse: bool,
) -> None:
    """Scan the (L, M) time-major ``a``, ``b`` into the preallocated (L, M) ``out``; ``initial``
    is (M,) or None (zeros)."""
    L = b.shape[0]
    M = b.numel() // L if L > 0 else 0
    if L == 0 or M == 0:
        return
    block_m = block_columns(M, device_facts(b.device))
    grid = (cdiv(M, block_m),)
    launcher(_linear_scan_fwd_kernel)[grid](
        a.contiguous(),
        b.contiguous(),
        initial.contiguous() if initial is not None else None,
        out,
        L,
        M,
        REVERSE=reverse,
        HAS_INIT=initial is not None,
        BLOCK_M=block_m,
        num_warps=4,
    )
