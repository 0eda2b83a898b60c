"""Target ``"executorch"``: a ``.pte`` program run by ExecuTorch's runtime.

ExecuTorch installs beside torch 2.13: ``executorch`` 1.5.1 (the newest on PyPI, 2026-11-30)
declares no torch pin in its ``Requires-Dist``, and ``pip install torch==2.13.0 executorch`` in a
fresh venv resolves to torch 2.13.0+cpu, executorch 1.5.1 and torchao 0.18.0; ``to_edge``, the
XNNPACK partitioner and ``executorch.runtime`` work with it. It is an optional extra
(``pip install 'ssmscan[executorch]'``): it pulls in ~60 packages (coremltools, scikit-learn,
pandas, hydra, torchao...).

ExecuTorch's emitter turns ``higher_order.scan`` into a loop of jump instructions, so the loop
realization is the default (O(L) work, one program for every length up to the bound of a dynamic
``Dim``); ``realization="parallel"`` gives plain aten at a static length. The top-level graph is
lowered with the XNNPACK partitioner (matmuls, convolutions, pointwise ops); the scan's body runs
on ExecuTorch's portable kernels.

ExecuTorch plans the memory of every intermediate tensor ahead of time, at the upper bound of
each dynamic dimension, and its runtime allocates that plan when it loads the program. A tensor
quadratic in the length (attention scores ``(batch, heads, L, L)``) makes the plan quadratic in
the bound: at ``L <= 65536`` four heads of float32 scores take 64 GiB each. :func:`build` checks
the plan against this machine's memory before it writes the program and raises
:class:`PlanTooLarge` naming the largest planned tensors, their layers and the bounds (the
runtime would otherwise fail with a bare ``std::bad_alloc``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from ._common import ExportReport, ExportResult, TargetUnavailable, file_size, temp_artifact
from ._experts import lower_experts
from ._lowering import lower_for_loop_backends
from ._prepare import Prepared
from ._signature import Signature
from .program import export_prepared

__all__ = ["PlanTooLarge", "build", "planned_bytes"]


class PlanTooLarge(ValueError):
    """ExecuTorch's memory plan, made at the upper bound of every dynamic dimension, exceeds
    this machine's memory (the message names the largest planned tensors and the bounds).

    Attributes:
        planned_bytes: bytes of the planned (non-constant) memory.
        limit_bytes: this machine's physical memory.
    """

    def __init__(self, message: str, planned_bytes: int, limit_bytes: int) -> None:
        super().__init__(message)
        self.planned_bytes = planned_bytes
        self.limit_bytes = limit_bytes


def _require_executorch() -> None:
    try:
        import executorch.exir
        import executorch.runtime  # noqa: F401
    except ImportError as e:
        raise TargetUnavailable(
            f"target 'executorch' needs the executorch package ({e}); install it with: "
            "pip install 'ssmscan[executorch]' (executorch 1.5.1 installs beside torch 2.13)"
        ) from e


def _partitioners() -> list[Any]:
    try:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner,
        )
    except ImportError:  # a build of executorch without XNNPACK: portable kernels only
        return []
    return [XnnpackPartitioner()]


def build(
    prepared: Prepared,
    path: str | None,
    realization: str | None,
    algorithm: str,
    dynamic: bool,
) -> ExportResult:
    """Export, realize the ssmscan ops, lower to ExecuTorch, write ``.pte``, load its runtime."""
    realization = realization or "loop"
    if realization == "parallel" and dynamic:
        raise ValueError(
            "target 'executorch' with realization='parallel' needs static shapes (the parallel "
            "scan is planned for one length); got dynamic_shapes. Use realization='loop' "
            "(higher_order.scan, run as a loop by ExecuTorch) or export at a fixed length."
        )
    _require_executorch()
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    report = ExportReport("executorch")
    ep = export_prepared(prepared, report)
    signature = prepared.signature(ep, torch.device("cpu"))
    lower_for_loop_backends(ep, realization, algorithm, report)
    lower_experts(ep, report, core_aten=True)
    partitioners = _partitioners()
    with report.stage("to_edge_transform_and_lower"):
        edge = to_edge_transform_and_lower(ep, partitioner=partitioners)
    report.census(edge.exported_program())
    report.notes.append(
        "delegated to XNNPACK where it applies" if partitioners else "portable kernels only"
    )
    with report.stage("to_executorch"):
        program = edge.to_executorch()
    _check_plan(program, signature, _physical_memory())
    planned = planned_bytes(program)
    report.notes.append(f"memory plan {_plan_shapes(signature)}: {planned / 2**20:.1f} MiB")
    temp_dir = None
    if path is None:
        temp_dir, path = temp_artifact("executorch", "model.pte")
    with report.stage("save"), open(path, "wb") as f:
        f.write(program.buffer)
    report.artifact_bytes = file_size(path)
    with report.stage("executorch load"):
        method = Runtime.get().load_program(path).load_method("forward")

    def run(*inputs: Any) -> list[torch.Tensor]:
        flat = [x for x in pytree.tree_leaves(inputs) if isinstance(x, torch.Tensor)]
        return [y for y in method.execute(flat) if isinstance(y, torch.Tensor)]

    return ExportResult("executorch", program, path, report, run, signature, temp_dir)


def planned_bytes(program: Any) -> int:
    """Bytes of the memory ExecuTorch planned for a program's intermediate tensors (and
    planned inputs and outputs), which its runtime allocates when it loads the program.

    Args:
        program: an ``ExecutorchProgramManager`` (``to_executorch()``'s result).

    Returns:
        The sum of the planned buffers of every method.
    """
    return sum(
        sum(plan.non_const_buffer_sizes) for plan in program.executorch_program.execution_plan
    )


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): nothing to check against
        return None


def _check_plan(program: Any, signature: Signature, limit: int | None) -> None:
    """Raise :class:`PlanTooLarge` where the planned memory exceeds ``limit`` bytes (``None``:
    no limit known)."""
    planned = planned_bytes(program)
    if limit is None or planned <= limit:
        return
    at = _plan_shapes(signature)
    largest = "; ".join(_largest_planned(program.exported_program().graph_module))
    raise PlanTooLarge(
        f"target 'executorch': {at} ExecuTorch's memory plan needs {_gib(planned)}, more than "
        f"this machine's {_gib(limit)}; largest planned tensors: {largest}. ExecuTorch plans "
        "every tensor at the upper bound of each dynamic dimension and allocates the plan when "
        "the program loads: lower the bounds in dynamic_shapes (Dim max), or export at a static "
        "length.",
        planned,
        limit,
    )


def _plan_shapes(signature: Signature) -> str:
    bounds = ", ".join(f"{name} <= {hi}" for name, (_, hi) in signature.dims.items())
    return f"at {bounds}" if bounds else "at the static shapes"


def _largest_planned(gm: fx.GraphModule, count: int = 3) -> list[str]:
    """The ``count`` largest shapes of planned tensors: dtype, size, how many, which layers."""
    from executorch.exir.tensor import TensorSpec as PlannedSpec

    sizes: dict[tuple[Any, ...], int] = {}
    counts: dict[tuple[Any, ...], int] = {}
    layers: dict[tuple[Any, ...], set[str]] = {}
    for mod in gm.modules():
        if not isinstance(mod, fx.GraphModule):
            continue
        for node in mod.graph.nodes:
            for spec in pytree.tree_leaves(node.meta.get("spec")):
                if not isinstance(spec, PlannedSpec) or spec.mem_id is None:
                    continue
                key = (tuple(spec.shape), str(spec.dtype).removeprefix("torch."))
                sizes[key] = spec.allocated_memory
                counts[key] = counts.get(key, 0) + 1
                stack = node.meta.get("nn_module_stack")
                if stack:  # nodes inside a delegate's outputs carry none
                    layers.setdefault(key, set()).add(list(stack.values())[-1][0] or "the model")
    ranked = sorted(sizes, key=lambda k: sizes[k], reverse=True)[:count]
    return [
        f"{shape} {dtype} ({_gib(sizes[shape, dtype])} each, {counts[shape, dtype]} planned"
        + (f", in {', '.join(sorted(layers[shape, dtype]))}" if (shape, dtype) in layers else "")
        + ")"
        for shape, dtype in ranked
    ]


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
