"""Realization 3 of the selective scan: ``torch.ops.higher_order.scan`` over time (dynamic L).

For backends that run loops well: the state (batch, dim, N) is the scan's carry, one step per time
index, O(L) work and O(batch * dim * N) state memory (the (batch, dim, N, L) decays are never
materialized: each step computes its own ``exp(dt_t A)``). The length may be symbolic, so one
``torch.export`` program serves every L.

Where the loop runs (measured with torch 2.13 CPU, onnxscript 0.7.2, onnxruntime 1.32):

* ONNX: the dynamo exporter (``torch.onnx.export(..., dynamo=True)``) translates
  ``higher_order.scan`` itself, into an ONNX ``Scan`` whose body is a local function
  (``torch/onnx/_internal/exporter/_torchlib/ops/hop.py``); the model keeps a dynamic L and runs
  in ONNX Runtime (no custom translation needed).
* AOTInductor (CPU): Inductor rewrites ``scan`` into ``while_loop``
  (``decompose_scan_to_while_loop``) and compiles the body to C++; ``aoti_compile_and_package``
  accepts a dynamic L and ``aoti_load_package`` runs the package in a process that never
  imports ssmscan.

Timings (L = 1024: ONNX Runtime and AOTInductor against the CPU kernel and the parallel
realization) are recorded in :mod:`ssmscan.passes.decompose_selective_scan`.

Outside Dynamo the scan HOP is called directly (the ``torch._higher_order_ops.scan.scan`` front
door compiles its body with Dynamo on every eager call): in eager mode it runs its reference
loop; under ``make_fx``/``torch.export`` it is traced as one ``higher_order.scan`` node with the
body as a subgraph and ``A`` as an additional input. Under ``torch.compile`` (Dynamo) the front
door is used, as Dynamo only captures a scan that comes through it (:func:`run_scan`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch._higher_order_ops.scan import scan, scan_op

from ssmscan.ops.selective_scan.parallel import finish_output, grouped_inputs

__all__ = ["run_scan", "selective_scan_loop"]


def run_scan(
    step: Callable[..., list[torch.Tensor]],
    init: torch.Tensor,
    xs: Sequence[torch.Tensor],
    additional: Sequence[torch.Tensor] = (),
) -> tuple[torch.Tensor, torch.Tensor]:
    """``higher_order.scan`` with one carry and one per-step output.

    Args:
        step: ``step(carry, *x_t, *additional) -> [new_carry, y_t]``; y_t must not alias the
            carry.
        init: the carry before the first step.
        xs: sequences scanned along their first dimension (length >= 1).
        additional: tensors passed whole to every step.

    Returns:
        ``(last_carry, ys)`` with ``ys`` stacking y_t along a new first dimension.

    Example:
        >>> import torch
        >>> step = lambda h, x: [h + x, (h + x).clone()]
        >>> run_scan(step, torch.zeros(2), [torch.ones(3, 2)])[1][:, 0]
        tensor([1., 2., 3.])
    """
    if isinstance(xs[0].shape[0], int) and xs[0].shape[0] == 1:
        # a static single step needs no loop; and AOTInductor's C++ code for a one-iteration
        # scan does not compile (torch 2.13: "conflicting declaration 'auto buf16'")
        last, y = step(init, *(x[0] for x in xs), *additional)
        return last, y.unsqueeze(0)
    if torch.compiler.is_dynamo_compiling():

        def combine(
            carry: torch.Tensor, x: list[torch.Tensor]
        ) -> tuple[torch.Tensor, torch.Tensor]:
            new, y = step(carry, *x, *additional)
            return new, y

        return scan(combine, init, list(xs))
    last, ys = scan_op(step, [init], list(xs), tuple(additional))
    return last, ys


def _step(
    h: torch.Tensor,
    dt: torch.Tensor,
    dtu: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    A: torch.Tensor,
) -> list[torch.Tensor]:
    """One time step; carry h (batch, G, dim/G, N), dt/dtu (batch, G, dim/G, 1), B/C
    (batch, G, 1, N), A (G, dim/G, N). Returns [h_t, y_t (batch, G, dim/G)]."""
    h = torch.exp(dt * A) * h + dtu * B
    return [h, (h * C).sum(-1)]


def selective_scan_loop(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    initial_state: torch.Tensor | None = None,
    algorithm: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Selective scan as a ``higher_order.scan`` loop over L (forward only, dynamic L).

    Same semantics as :func:`ssmscan.ops.selective_scan.reference.selective_scan_reference` and the
    op ``ssmscan::selective_scan_fwd`` (without its checkpoints).

    Args:
        u, delta: (batch, dim, L), float32/float16/bfloat16/float64; L may be symbolic (>= 1
            when symbolic).
        A: (dim, N), float32 (float64 for float64 ``u``).
        B, C: (batch, N, L) or grouped (batch, G, N, L), dtype of ``u`` or the state dtype.
        D, delta_bias: optional (dim,), dtype like ``A``.
        z: optional (batch, dim, L) gate, dtype of ``u``.
        delta_softplus: apply softplus to ``delta + delta_bias``.
        initial_state: optional (batch, dim, N) state before the first step, in the state dtype.
        algorithm: ignored (kept so both realizations share one signature).

    Returns:
        ``(out, last_state)``: out (batch, dim, L) in ``u``'s dtype, last_state (batch, dim, N) in
        the state dtype (float64 for float64 ``u``, else float32).

    Example:
        >>> import torch
        >>> u, dt = torch.randn(1, 4, 5), torch.rand(1, 4, 5) * 0.1
        >>> A, B, C = -torch.rand(4, 2), torch.randn(1, 2, 5), torch.randn(1, 2, 5)
        >>> out, last = selective_scan_loop(u, dt, A, B, C)
        >>> out.shape, last.shape
        (torch.Size([1, 4, 5]), torch.Size([1, 4, 2]))
    """
    del algorithm
    batch, dim, L = u.shape
    N = A.shape[1]
    dt, dtu, Ag, Bg, Cg = grouped_inputs(u, delta, A, B, C, delta_bias, delta_softplus)
    groups, per_group = Ag.shape[0], Ag.shape[1]
    cdt = dt.dtype
    if initial_state is None:
        h0 = torch.zeros((batch, groups, per_group, N), dtype=cdt, device=u.device)
    else:
        h0 = initial_state.to(cdt).reshape(batch, groups, per_group, N)
    if isinstance(L, int) and L == 0:  # the scan op needs one step at least
        return finish_output(dt.reshape(batch, dim, 0), u, D, z), h0.reshape(batch, dim, N).clone()
    # time-major sequences: one slice per step
    xs = [
        dt.movedim(-1, 0).unsqueeze(-1),  # (L, batch, G, dim/G, 1)
        dtu.movedim(-1, 0).unsqueeze(-1),
        Bg.movedim(-1, 0).unsqueeze(3),  # (L, batch, G, 1, N)
        Cg.movedim(-1, 0).unsqueeze(3),
    ]
    last, ys = run_scan(_step, h0, xs, (Ag,))
    y = ys.reshape(L, batch, dim).permute(1, 2, 0)
    return finish_output(y, u, D, z), last.reshape(batch, dim, N)
