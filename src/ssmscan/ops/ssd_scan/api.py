"""``ssmscan.ssd_scan``: the public entry point over the SSD scan's realizations."""

from __future__ import annotations

from typing import Literal

import torch

from ssmscan.ops.ssd_scan import op as _op  # noqa: F401  (registers the ops)
from ssmscan.ops.ssd_scan.checks import check_ssd_scan_args
from ssmscan.ops.ssd_scan.common import plan_chunk_size
from ssmscan.ops.ssd_scan.loop import ssd_scan_loop
from ssmscan.ops.ssd_scan.parallel import ssd_scan_parallel
from ssmscan.ops.ssd_scan.reference import ssd_scan_reference

Impl = Literal["auto", "cpu", "triton", "parallel", "loop", "reference"]


def ssd_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int | None = None,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    impl: Impl = "auto",
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Mamba-2's state-space dual (SSD) scan, a drop-in for mamba-ssm's
    ``mamba_chunk_scan_combined`` (same argument names, shapes and results).

    For batch b, head h (group g of h), headdim p, state n, time t::

        dt_t  = clamp(softplus(dt_t[h] + dt_bias[h]), dt_limit)   (bias, softplus optional)
        h_t   = exp(dt_t * A[h]) * h_{t-1} + dt_t * x_t[h, p] * B_t[g, n]
        y_t   = sum_n C_t[g, n] * h_t[p, n] + D[h(, p)] * x_t[h, p]
        out_t = y_t * silu(z_t)                                    (z optional)

    As in mamba-ssm, the clamp to ``dt_limit`` always applies (its default ``(0, inf)`` turns a
    negative time step into 0). Differentiable in every tensor argument; works under
    ``torch.compile(fullgraph=True)`` and ``torch.export`` (one ``ssmscan::ssd_scan_fwd`` node).

    Args:
        x: (batch, L, nheads, headdim), float32, float16, bfloat16 or float64.
        dt: (batch, L, nheads).
        A: (nheads,), the (negative) decay rate per head.
        B, C: (batch, L, ngroups, dstate), nheads divisible by ngroups; head h reads group
            h // (nheads // ngroups).
        chunk_size: steps per chunk of the chunked algorithm. It changes the speed, never the
            result beyond rounding; None lets the planner choose (``common.plan_chunk_size``).
        D: optional skip weight, (nheads, headdim) or (nheads,).
        z: optional gate, (batch, L, nheads, headdim), dtype of ``x``.
        dt_bias: optional (nheads,), added to ``dt`` before the softplus.
        initial_states: optional (batch, nheads, headdim, dstate) state before the first step;
            zero when None.
        seq_idx: optional (batch, L) int32/int64 sequence index of each token, for packed
            sequences: the state restarts wherever it changes, so tokens of different sequences
            never mix; the initial state is the state of sequence 0 (tokens see it only while
            ``seq_idx`` is 0 from the start). Expected nondecreasing, as mamba-ssm requires.
        dt_softplus: apply softplus (threshold 20) to ``dt + dt_bias``.
        dt_limit: ``(min, max)`` clamp of the time step after the softplus.
        return_final_states: also return the state after the last step.
        impl: ``"auto"`` (the kernel for the tensors' device), ``"cpu"`` (the chunked CPU
            kernel), ``"triton"`` (the Triton kernels, CUDA tensors), ``"parallel"`` (the
            chunked form in plain aten ops, static L, any device: ``ops/ssd_scan/parallel.py``),
            ``"loop"`` (a ``higher_order.scan`` over time, any L and device:
            ``ops/ssd_scan/loop.py``) or ``"reference"`` (the sequential oracle, slow).
            ``"parallel"`` and ``"loop"`` are differentiable through autograd and trace into
            graphs without ssmscan ops.

        dt, A, B, C, D, dt_bias and initial_states take ``x``'s dtype or the state dtype
        (float32; float64 for float64 ``x``).

    Returns:
        ``out`` (batch, L, nheads, headdim) in ``x``'s dtype; with ``return_final_states``,
        ``(out, final_states)`` where ``final_states`` is (batch, nheads, headdim, dstate) in the
        state dtype. Accumulation is float32 (float64 for float64 inputs).

    Example:
        >>> import torch, ssmscan
        >>> x, dt = torch.randn(2, 33, 4, 8), torch.rand(2, 33, 4)
        >>> A = -torch.rand(4)
        >>> B, C = torch.randn(2, 33, 1, 16), torch.randn(2, 33, 1, 16)
        >>> out, last = ssmscan.ssd_scan(x, dt, A, B, C, return_final_states=True)
        >>> out.shape, last.shape
        (torch.Size([2, 33, 4, 8]), torch.Size([2, 4, 8, 16]))
    """
    check_ssd_scan_args(
        x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_limit
    )
    if impl == "reference":
        return ssd_scan_reference(
            x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dt_softplus,
            dt_limit, return_final_states,
        )  # fmt: skip
    if impl in ("parallel", "loop"):
        options = (D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit)
        if impl == "parallel":
            out, final = ssd_scan_parallel(x, dt, A, B, C, *options, chunk_size=chunk_size)
        else:
            out, final = ssd_scan_loop(x, dt, A, B, C, *options)
        return (out, final) if return_final_states else out
    if impl not in ("auto", "cpu", "triton"):
        raise ValueError(
            "impl must be one of 'auto', 'cpu', 'triton', 'parallel', 'loop', 'reference'; "
            f"got {impl!r}"
        )
    want = {"cpu": "cpu", "triton": "cuda"}.get(impl, x.device.type)
    if x.device.type != want or want not in ("cpu", "cuda"):
        raise NotImplementedError(
            f"ssd_scan runs impl='cpu' on CPU tensors and impl='triton' (Triton kernels) on CUDA "
            f"tensors; got impl={impl!r} with x on {x.device}: use impl='auto', "
            "impl='parallel' or 'loop' (plain aten, any device), impl='reference' (any device, "
            "slow) or move the tensors"
        )
    _, _, nheads, headdim = x.shape
    Q = chunk_size or plan_chunk_size(nheads, headdim, B.shape[3], B.shape[2])
    out, final = torch.ops.ssmscan.ssd_scan_fwd(
        x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx,
        dt_softplus, float(dt_limit[0]), float(dt_limit[1]), Q,
    )  # fmt: skip
    return (out, final) if return_final_states else out
