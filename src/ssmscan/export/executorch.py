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
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

from ._common import ExportReport, ExportResult, TargetUnavailable, file_size, temp_artifact
from ._experts import lower_experts
from ._lowering import lower_for_loop_backends
from ._prepare import Prepared
from .program import export_prepared


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
