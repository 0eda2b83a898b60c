"""Target ``"aoti"``: an AOTInductor package (``.pt2``) that runs without ssmscan installed.

CPU: the ssmscan ops are realized first (loop by default: Inductor turns ``higher_order.scan``
into a C++ ``while`` loop, any length; 4.2 ms vs 24 ms for the parallel form at batch 1, dim 128,
L 1024 on 2 cores), so the package holds only Inductor's own code. CUDA: the ops stay, and
Inductor compiles their Triton kernels into the package (``torch.library.triton_op`` recipe).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ._common import ExportReport, ExportResult, example_device, file_size, flat_outputs
from ._lowering import lower_for_loop_backends
from .program import export_program


def build(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    dynamic_shapes: Any,
    path: str | None,
    realization: str | None,
    algorithm: str,
) -> ExportResult:
    device = example_device(example_inputs)
    report = ExportReport("aoti")
    ep = export_program(model, example_inputs, dynamic_shapes, report)
    if device.type == "cpu" or realization is not None:
        lower_for_loop_backends(ep, realization or "loop", algorithm, report)
    else:
        report.notes.append("ssmscan ops kept: their Triton kernels are compiled into the package")
    report.census(ep)
    if path is None:
        import tempfile

        path = os.path.join(tempfile.mkdtemp(prefix="ssmscan-aoti-"), "model.pt2")
    with report.stage("aoti compile"):
        torch._inductor.aoti_compile_and_package(ep, package_path=path)
    report.artifact_bytes = file_size(path)
    with report.stage("aoti load"):
        runner = torch._inductor.aoti_load_package(path)

    def run(*inputs: Any) -> list[torch.Tensor]:
        with torch.no_grad():
            return flat_outputs(runner(*inputs))

    return ExportResult("aoti", runner, path, report, run)
