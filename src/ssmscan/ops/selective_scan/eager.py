"""The public API's eager CUDA path: the Triton launchers called straight from an
``autograd.Function``, without the custom op's dispatch.

Note [eager CUDA fast path]: an eager call of ``torch.ops.ssmscan.selective_scan_fwd`` goes
through the dispatcher into ``custom_op``'s Python autograd wrapper, which re-dispatches to its
Python backend wrapper (alias checks on the outputs), which turns ``wrap_triton`` off and runs
the body; the backward does the same for ``selective_scan_bwd``. That is host time, and host
time is what bounds batch-1 eager calls (``benchmarks/selective_scan/host_breakdown.py``;
results in ``benchmarks/RESULTS.md``). ``ssmscan.selective_scan`` therefore calls the same
launchers from ``_Scan`` (same kernels, same outputs bit for bit, same saved tensors) when the
call is plain eager CUDA work: CUDA tensors of the ``torch.Tensor`` / ``nn.Parameter`` types (no
FakeTensor, FunctionalTensor or other subclass), no dispatch or torch-function mode, no functorch
transform, no profiler (a profile shows the op), not inside ``torch.compile`` tracing or
``torch.jit.trace``. Everything else (tracing, export, CPU, float64) takes the op, so graphs
still hold one ``ssmscan::selective_scan_fwd`` node. The API's ``_run_op(...,
eager_fast_path=False)`` takes the op instead (the tests compare the two).
"""

from __future__ import annotations

from typing import Any

import torch

from ssmscan.ops.selective_scan import op

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def plain_eager(tensors: tuple[torch.Tensor | None, ...]) -> bool:
    """Whether these tensors are plain ones in plain eager mode (Note [eager CUDA fast path]):
    nothing that tracing, a mode, a transform or a profiler would need to see as the op."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    if torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled():
        return False
    if torch._C._are_functorch_transforms_active() or torch.autograd.profiler._is_profiler_enabled:
        return False
    return all(t is None or type(t) in _PLAIN for t in tensors)


def fast_path_ok(tensors: tuple[torch.Tensor | None, ...], delta_softplus: object) -> bool:
    """Whether ``ssmscan.selective_scan`` may take ``selective_scan`` below (``tensors[0]`` is
    ``u``)."""
    if torch.compiler.is_compiling():  # first: dynamo need not trace the checks below
        return False
    u = tensors[0]
    return (
        type(delta_softplus) is bool  # else the op's schema converts or rejects it
        and isinstance(u, torch.Tensor)
        and u.is_cuda
        and u.dtype != torch.float64
        and plain_eager(tensors)
    )


def _forward(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    delta_softplus: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from torch._library.triton import set_wrap_triton_enabled

    from ssmscan.ops.selective_scan import triton_fwd

    with set_wrap_triton_enabled(False):  # direct launches (the launchers' eager path)
        return triton_fwd.forward(
            u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus
        )  # fmt: skip


class _Scan(torch.autograd.Function):
    """``selective_scan_fwd`` / ``selective_scan_bwd`` without the dispatcher (Note [eager CUDA
    fast path]): the op's autograd formula (``op._backward``). Under ``create_graph`` the
    backward is the op itself, so that differentiating the gradients fails as it does on the op
    path (the backward op has no autograd formula) instead of silently treating them as
    constants."""

    @staticmethod
    def forward(ctx: Any, *args: Any) -> tuple[torch.Tensor, torch.Tensor]:
        out, last, ckpt = _forward(*args)
        u, delta, A, B, C, D, z, delta_bias, initial_state, delta_softplus = args
        ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, initial_state, ckpt)
        ctx.delta_softplus = delta_softplus
        ctx.set_materialize_grads(False)  # a None dlast stays None (no zeros, no extra pass)
        return out, last

    @staticmethod
    def backward(
        ctx: Any, dout: torch.Tensor | None, dlast: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        from torch._library.triton import set_wrap_triton_enabled

        from ssmscan.ops.selective_scan import triton_bwd

        if torch.is_grad_enabled():  # create_graph: the op's own formula, the op inside
            return op._backward(ctx, dout, dlast, None)
        u, delta, A, B, C, D, z, delta_bias, initial_state, ckpt = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(u)
        with set_wrap_triton_enabled(False):
            grads = triton_bwd.backward(
                dout, dlast, u, delta, A, B, C, D, z, delta_bias, initial_state, ckpt,
                ctx.delta_softplus,
            )  # fmt: skip
        return op.input_grads(grads, D, z, delta_bias, initial_state)


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    initial_state: torch.Tensor | None,
    delta_softplus: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, last_state) from the Triton launchers, differentiable (``_Scan``) when grad mode is
    on and an input requires grad; arguments already checked (``check_selective_scan_args``)."""
    tensors = (u, delta, A, B, C, D, z, delta_bias, initial_state)
    args = (*tensors, delta_softplus)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        return _Scan.apply(*args)
    out, last, _ = _forward(*args)
    return out, last
