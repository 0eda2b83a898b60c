"""mamba-ssm's function names, with its exact signatures, on ssmscan ops.

A mamba-ssm (2.3.2) user changes one import and keeps every call::

    # from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    # from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    # from mamba_ssm.ops.triton.selective_state_update import selective_state_update
    from ssmscan.integrations.mamba_ssm import (
        mamba_chunk_scan_combined, selective_scan_fn, selective_state_update)

Same argument names, order and defaults, same result forms. Where mamba-ssm would accept an
input that ssmscan cannot run, the call raises ``ValueError`` / ``TypeError`` /
``NotImplementedError`` naming the argument; nothing is ignored. Known differences:

- ``selective_scan_fn``: the last state is differentiable (mamba-ssm drops its gradient);
  float64 inputs are accepted.
- ``mamba_chunk_scan_combined``: ``ssmscan.ssd_scan`` picks its kernel by device (the chunked
  CPU kernel, or the Triton kernels on CUDA). ``return_varlen_states`` needs
  ``seq_idx`` marking the same sequences as ``cu_seqlens`` (as mamba-ssm's ``Mamba2`` passes
  them); the states are then each sequence's exact state after its last token, and
  differentiable (mamba-ssm's backward refuses them). They cost a second scan of the packed
  tokens. mamba-ssm 2.3.2 leaves ``initial_states`` out of the first sequence's state when that
  sequence ends inside the first chunk (``chunk_state_varlen``); here it is in, as in ``out``.
- ``selective_state_update``: ``ssmscan.selective_state_update`` itself. ``state`` may hold more
  rows than the batch only with ``state_batch_indices`` (mamba-ssm silently uses the first
  rows); ``dt_bias=None`` works for A and dt tied over headdim too (mamba-ssm 2.3.2's launcher
  reads ``dt_bias.stride`` there).

The module's tests check each function against ssmscan's float64 references and, when
mamba-ssm's source is at hand, against mamba-ssm's pure-PyTorch references
(``selective_scan_ref``, ``ssd_minimal_discrete``, ``ssd_chunk_scan_combined_ref``,
``selective_state_update_ref``); ``benchmarks/integrations`` runs mamba-ssm's own op tests on
these functions and compares with mamba-ssm's Triton SSD implementation.
"""

from __future__ import annotations

import torch

from ssmscan.ops.common.checks import check_ndim, check_tensor, describe
from ssmscan.ops.selective_scan.api import selective_scan
from ssmscan.ops.selective_state_update.api import selective_state_update
from ssmscan.ops.ssd_scan.api import ssd_scan
from ssmscan.ops.ssd_scan.common import process_dt, segment_ids, state_dtype

__all__ = ["mamba_chunk_scan_combined", "selective_scan_fn", "selective_state_update"]


def selective_scan_fn(
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
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """mamba-ssm's ``selective_scan_fn`` (``mamba_ssm.ops.selective_scan_interface``) on
    ``ssmscan.selective_scan``.

    Args:
        u, delta: (batch, dim, L), float32/float16/bfloat16 (float64 too).
        A: (dim, N), float32, or complex64 (S4D-style).
        B, C: (batch, N, L) or grouped (batch, G, N, L), dtype of ``u`` or float32; or
            time-invariant (dim, N) like ``A``; with complex ``A`` a variable B / C is
            (batch, (G,) N, 2L) real (mamba-ssm's layout).
        D: optional (dim,) float32.
        z: optional (batch, dim, L) gate, dtype of ``u``.
        delta_bias: optional (dim,) float32.
        delta_softplus: softplus on ``delta + delta_bias``.
        return_last_state: also return the state after the last step.

    Returns:
        ``out`` (batch, dim, L) in ``u``'s dtype (gated by ``silu(z)`` when ``z`` is given), or
        ``(out, last_state)`` with ``last_state`` (batch, dim, N) float32 (complex64 for complex
        ``A``).

    Example:
        >>> import torch
        >>> from ssmscan.integrations.mamba_ssm import selective_scan_fn
        >>> u, delta = torch.randn(2, 4, 9), torch.rand(2, 4, 9)
        >>> A, B, C = -torch.rand(4, 3), torch.randn(2, 3, 9), torch.randn(2, 3, 9)
        >>> out, last = selective_scan_fn(u, delta, A, B, C, return_last_state=True)
        >>> out.shape, last.shape
        (torch.Size([2, 4, 9]), torch.Size([2, 4, 3]))
    """
    return selective_scan(
        u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state
    )  # fmt: skip


def mamba_chunk_scan_combined(
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
    cu_seqlens: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    return_varlen_states: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """mamba-ssm's ``mamba_chunk_scan_combined`` (``mamba_ssm.ops.triton.ssd_combined``) on
    ``ssmscan.ssd_scan``.

    Args:
        x: (batch, L, nheads, headdim), float32/float16/bfloat16 (float64 too).
        dt: (batch, L, nheads).
        A: (nheads,).
        B, C: (batch, L, ngroups, dstate).
        chunk_size: steps per chunk; changes the speed, not the result beyond rounding.
        D: optional (nheads, headdim) or (nheads,).
        z: optional (batch, L, nheads, headdim) gate.
        dt_bias: optional (nheads,).
        initial_states: optional (batch, nheads, headdim, dstate).
        seq_idx: optional (batch, L) int32/int64, nondecreasing: the state restarts where it
            changes (packed sequences).
        cu_seqlens: (nseq + 1,) int32/int64 cumulative sequence lengths of packed sequences,
            starting at 0, strictly increasing, at most L; only used with
            ``return_varlen_states`` (as in mamba-ssm).
        dt_softplus: softplus on ``dt + dt_bias``.
        dt_limit: ``(min, max)`` clamp of the time step (always applied, as in mamba-ssm).
        return_final_states: also return the state after the last step.
        return_varlen_states: also return the state after the last token of each sequence of
            ``cu_seqlens``; needs batch 1 and ``seq_idx`` marking the same sequences (checked in
            eager, one host read of ``cu_seqlens`` and ``seq_idx``). The states come from a
            second scan of the sequences, right-aligned in a (nseq, longest) batch.

    Returns:
        ``out`` (batch, L, nheads, headdim) in ``x``'s dtype; ``(out, final_states)`` with
        ``return_final_states``; ``(out, varlen_states)`` with ``return_varlen_states``;
        ``(out, final_states, varlen_states)`` with both. States are (batch, nheads, headdim,
        dstate) and (nseq, nheads, headdim, dstate), float32 (float64 for float64 ``x``).

    Example:
        >>> import torch
        >>> from ssmscan.integrations.mamba_ssm import mamba_chunk_scan_combined
        >>> g = torch.Generator().manual_seed(0)
        >>> x, dt = torch.randn(1, 10, 2, 4, generator=g), torch.rand(1, 10, 2, generator=g)
        >>> A = -torch.rand(2, generator=g)
        >>> B, C = torch.randn(1, 10, 1, 8, generator=g), torch.randn(1, 10, 1, 8, generator=g)
        >>> cu_seqlens = torch.tensor([0, 3, 10])
        >>> seq_idx = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1, 1]])
        >>> out, last, per_seq = mamba_chunk_scan_combined(
        ...     x, dt, A, B, C, 4, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
        ...     return_final_states=True, return_varlen_states=True)
        >>> out.shape, per_seq.shape, bool(torch.allclose(per_seq[1], last[0], atol=1e-6))
        (torch.Size([1, 10, 2, 4]), torch.Size([2, 2, 4, 8]), True)
    """
    if return_varlen_states:
        _check_varlen_args(x, seq_idx, cu_seqlens)
    out, final = ssd_scan(
        x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus,
        dt_limit, return_final_states=True,
    )  # fmt: skip
    if not return_varlen_states:
        return (out, final) if return_final_states else out
    assert seq_idx is not None and cu_seqlens is not None  # _check_varlen_args
    varlen = _varlen_states(
        x, dt, A, B, chunk_size, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus,
        dt_limit,
    )  # fmt: skip
    return (out, final, varlen) if return_final_states else (out, varlen)


def _traced(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return torch.compiler.is_compiling() or t.device.type == "meta" or is_fake(t)


def _check_varlen_args(
    x: torch.Tensor, seq_idx: torch.Tensor | None, cu_seqlens: torch.Tensor | None
) -> None:
    """``return_varlen_states``'s requirements, each error naming its argument."""
    if cu_seqlens is None:
        raise ValueError("cu_seqlens must be given when return_varlen_states=True")
    check_tensor("cu_seqlens", cu_seqlens)
    check_tensor("x", x)
    check_ndim("cu_seqlens", cu_seqlens, (1,), "1-D (nseq + 1,) cumulative sequence lengths")
    if cu_seqlens.dtype not in (torch.int32, torch.int64) or cu_seqlens.shape[0] < 2:
        raise ValueError(
            "cu_seqlens must be an int32/int64 (nseq + 1,) tensor with nseq >= 1; got "
            f"{describe(cu_seqlens)}"
        )
    if x.dim() != 4 or x.shape[0] != 1:
        raise ValueError(
            "return_varlen_states needs x of batch 1 (packed sequences, as mamba-ssm); got x "
            f"{describe(x)}"
        )
    if seq_idx is None:
        raise ValueError(
            "return_varlen_states needs seq_idx marking the same sequences as cu_seqlens: "
            "without it the scan does not restart between sequences (out mixes them) and the "
            "state after a sequence's last token is not that sequence's state"
        )
    if cu_seqlens.device != x.device:
        raise ValueError(
            f"cu_seqlens is on device {cu_seqlens.device} but x is on {x.device} "
            f"(cu_seqlens: {describe(cu_seqlens)})"
        )
    if _traced(cu_seqlens) or _traced(seq_idx):
        return  # values are the caller's to get right under tracing
    if seq_idx.shape != (1, x.shape[1]):
        return  # ssd_scan's checks name seq_idx's shape
    cu = cu_seqlens.to(torch.int64)
    L = x.shape[1]
    if int(cu[0]) != 0 or not bool((cu[1:] > cu[:-1]).all()) or int(cu[-1]) > L:
        raise ValueError(
            f"cu_seqlens must start at 0, increase strictly and end at most at L={L}; got "
            f"{cu.tolist()}"
        )
    s = seq_idx[0, : int(cu[-1])].to(torch.int64)
    changes = torch.nonzero(s[1:] != s[:-1]).flatten() + 1  # positions where seq_idx changes
    if not torch.equal(changes, cu[1:-1]):
        raise ValueError(
            "seq_idx must change exactly where cu_seqlens starts a new sequence (at "
            f"{cu[1:-1].tolist()}) and nowhere else before {int(cu[-1])}; it changes at "
            f"{changes.tolist()}"
        )


def _varlen_states(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    chunk_size: int,
    dt_bias: torch.Tensor | None,
    initial_states: torch.Tensor | None,
    seq_idx: torch.Tensor,
    cu_seqlens: torch.Tensor,
    dt_softplus: bool,
    dt_limit: tuple[float, float],
) -> torch.Tensor:
    """(nseq, nheads, headdim, dstate): the state after the last token of each sequence.

    Each sequence is scanned on its own, right-aligned in a (nseq, longest, ...) batch; the
    padding steps in front have x = 0 and a processed time step of 0, so they neither decay nor
    add to the state. The first sequence starts from ``initial_states`` when the scan gives it
    the initial state (``seq_idx`` 0 from the start, ``common.segment_ids``), the others from
    zero."""
    sdt = state_dtype(x.dtype)
    _, _, nheads, headdim = x.shape
    dstate = B.shape[3]
    cu = cu_seqlens.to(device=x.device, dtype=torch.int64)
    starts, ends = cu[:-1], cu[1:]
    nseq = starts.shape[0]
    longest = int((ends - starts).max())
    # idx[i, j]: the token at step j of sequence i's row, right-aligned; valid from its start
    idx = ends[:, None] - longest + torch.arange(longest, device=x.device)[None, :]
    valid = idx >= starts[:, None]
    idx = idx.clamp(min=0)
    d = process_dt(dt, dt_bias, dt_softplus, dt_limit[0], dt_limit[1], sdt)[0]  # (L, nheads)
    d_rows = torch.where(valid[..., None], d[idx], torch.zeros((), dtype=sdt, device=x.device))
    x_rows = torch.where(
        valid[..., None, None], x[0][idx], torch.zeros((), dtype=x.dtype, device=x.device)
    )
    B_rows = B[0][idx]  # padding steps read a real token's B but add dt * x * B = 0
    h0 = None
    if initial_states is not None:
        sees_initial = segment_ids(seq_idx)[0, ends - 1] == 0  # (nseq,)
        h0 = initial_states.to(sdt).expand(nseq, nheads, headdim, dstate)
        h0 = h0 * sees_initial.to(sdt)[:, None, None, None]
    _, states = ssd_scan(
        x_rows, d_rows, A, B_rows, B_rows, chunk_size, initial_states=h0,
        dt_limit=(-float("inf"), float("inf")), return_final_states=True,
    )  # fmt: skip
    return states
