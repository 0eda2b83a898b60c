"""Registration of ``ssmscan::selective_state_update``: one decode step, functional.

The op is functional (returns ``(out, new_state)``, mutates nothing), so ``torch.compile`` and
``torch.export`` need no mutation handling; ``ssmscan.selective_state_update`` writes
``new_state`` back into ``state`` with ``copy_`` for mamba-ssm compatibility, which
functionalization turns into an ordinary copy under compile. CUDA: the Triton kernel through
``wrap_triton`` (float64 states: the aten path, in float64); CPU: the same math in aten ops (one
step is a handful of elementwise ops). No autograd: decoding is inference.

``ssmscan::selective_state_update_`` is the same step in place (mutates ``state``, returns
``out``), writing only the rows the batch entries pick: eager's path, so a step costs one pass
over the picked rows rather than copies of the whole state or cache.
"""

from __future__ import annotations

import torch
from torch.library import custom_op

from ssmscan._library import qualname, triton_backed_op
from ssmscan.ops.selective_state_update import cpu
from ssmscan.ops.selective_state_update.checks import (
    check_selective_state_update_args,
    check_state_writable,
)
from ssmscan.ops.selective_state_update.reference import (
    selective_state_update_reference,
    updated_rows,
)


def _compute_dtype(state: torch.Tensor) -> torch.dtype:
    return torch.float64 if state.dtype == torch.float64 else torch.float32


@triton_backed_op("selective_state_update")
def selective_state_update_op(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    state_batch_indices: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out shaped like x in x's dtype, new_state shaped like state in state's dtype), both fresh
    and contiguous. Layouts and ``state_batch_indices`` as in ``selective_state_update``; rows of
    ``state`` no batch entry picks are copied through unchanged."""
    check_selective_state_update_args(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    new_state = torch.empty(state.shape, dtype=state.dtype, device=state.device)
    if x.device.type == "cuda" and state.dtype != torch.float64:
        from ssmscan.ops.selective_state_update import triton_fwd

        if state_batch_indices is not None:
            new_state.copy_(state)
        triton_fwd.launch(
            state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, out, new_state, state_batch_indices
        )
        return out, new_state
    if x.device.type not in ("cpu", "meta", "cuda"):
        raise NotImplementedError(
            f"ssmscan::selective_state_update has kernels for cpu and cuda; got {x.device}"
        )
    if cpu.supported(state, _compute_dtype(state)):
        new_state.copy_(state)
        out.copy_(
            cpu.step_(new_state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices)
        )
        return out, new_state
    y, h = selective_state_update_reference(
        state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices
    )
    out.copy_(y)
    new_state.copy_(h)
    return out, new_state


@custom_op(qualname("selective_state_update_"), mutates_args=("state",))
def selective_state_update_(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    state_batch_indices: torch.Tensor | None = None,
) -> torch.Tensor:
    """The same step writing ``state`` in place (only the rows the batch entries pick): out
    shaped like x, fresh. Eager's path (mamba-ssm's in-place semantics without copying the state
    or the whole cache); ``torch.compile`` and ``torch.export`` trace the functional op."""
    check_selective_state_update_args(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices)
    check_state_writable(state)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.device.type == "cuda" and state.dtype != torch.float64:
        from torch._library.triton import set_wrap_triton_enabled

        from ssmscan.ops.selective_state_update import triton_fwd

        # this body only runs eagerly (tracing takes the fake or the functional op): a direct
        # launch, not the wrap_triton higher-order op
        with set_wrap_triton_enabled(False):
            triton_fwd.launch(
                state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, out, state, state_batch_indices
            )
        return out
    if x.device.type not in ("cpu", "cuda"):
        raise NotImplementedError(
            f"ssmscan::selective_state_update_ has kernels for cpu and cuda; got {x.device}"
        )
    cdt = _compute_dtype(state)
    if cpu.supported(state, cdt):
        return cpu.step_(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices)
    y, h = updated_rows(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices, cdt)
    out.copy_(y.reshape(x.shape))
    new = h.to(state.dtype).reshape(-1, *state.shape[1:])
    if state_batch_indices is None:
        state.copy_(new)
    else:
        picked = state_batch_indices >= 0  # eager: the boolean index costs one sync at most
        state[state_batch_indices[picked]] = new[picked]
    return out


@selective_state_update_.register_fake
def _(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices=None):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)
