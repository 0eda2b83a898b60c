"""Realization 3 of ``linear_scan``: ``torch.ops.higher_order.scan`` along time (dynamic length).

The state (``b``'s shape without ``dim``) is the scan's carry: O(L) work, any length, symbolic
included, so one ``torch.export`` program serves every L. ``reverse`` flips the sequences around
the loop (as ``torch._higher_order_ops.scan.scan`` does). Arithmetic in float32 (float64 for
float64 inputs), the result in ``b``'s dtype, fresh and contiguous.

The HOP is called through :func:`ssmscan.ops.selective_scan.loop.run_scan` (see that module for
why, and for which backends run it: the ONNX dynamo exporter emits an ONNX ``Scan``, AOTInductor a C++ loop).
"""

from __future__ import annotations

import torch

from ssmscan.ops.selective_scan.loop import run_scan

__all__ = ["linear_scan_loop"]


def _step(h: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    h = a * h + b
    return [h, h.clone()]  # the per-step output must not alias the carry


def linear_scan_loop(
    a: torch.Tensor,
    b: torch.Tensor,
    dim: int = -1,
    reverse: bool = False,
    initial: torch.Tensor | None = None,
    algorithm: str = "auto",
) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t along ``dim`` as a ``higher_order.scan`` loop (forward only).

    Same semantics as :func:`ssmscan.linear_scan` and
    :func:`ssmscan.ops.linear_scan.reference.linear_scan_reference`.

    Args:
        a: decay, same shape and dtype as ``b``.
        b: input, any shape; the size along ``dim`` may be symbolic (>= 1 when symbolic).
        dim: the time dimension.
        reverse: run from the last step to the first (h_t = a_t h_{t+1} + b_t).
        initial: ``b``'s shape without ``dim``, dtype of ``b``; zero when None.
        algorithm: ignored (kept so both realizations share one signature).

    Returns:
        h, a new contiguous tensor with ``b``'s shape and dtype.

    Example:
        >>> import torch
        >>> linear_scan_loop(torch.full((1, 3), 0.5), torch.ones(1, 3))
        tensor([[1.0000, 1.5000, 1.7500]])
    """
    del algorithm
    dim = dim % b.dim()
    L = b.shape[dim]
    if isinstance(L, int) and L == 0:  # the scan op needs one step at least
        return b.clone(memory_format=torch.contiguous_format)
    cdt = torch.float64 if b.dtype == torch.float64 else torch.float32
    xs = [a.to(cdt).movedim(dim, 0), b.to(cdt).movedim(dim, 0)]
    if reverse:
        xs = [x.flip(0) for x in xs]
    if initial is not None:
        h0 = initial.to(cdt)
    else:
        h0 = torch.zeros(xs[1].shape[1:], dtype=cdt, device=b.device)
    _, hs = run_scan(_step, h0.contiguous(), xs)
    if reverse:
        hs = hs.flip(0)
    return hs.movedim(0, dim).to(b.dtype).contiguous()
