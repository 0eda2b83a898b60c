"""Target ``"export"``: a ``torch.export`` program that keeps the ssmscan ops (realization 1).

For users who load ssmscan where the program runs; also the first stage of every other target.
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import ExportReport, ExportResult, example_device, file_size, flat_outputs
from ._prepare import Prepared


def export_program(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    dynamic_shapes: Any,
    report: ExportReport,
) -> torch.export.ExportedProgram:
    """``torch.export.export`` of ``model`` in eval mode (the stage ``"export"`` of ``report``);
    the mode of every submodule is restored afterwards."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    if not isinstance(example_inputs, tuple):
        raise TypeError(
            f"example_inputs must be a tuple of the model's positional inputs; got "
            f"{type(example_inputs).__name__}"
        )
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with report.stage("export"):
            return torch.export.export(model, example_inputs, dynamic_shapes=dynamic_shapes)
    finally:
        for m, training in modes:
            m.training = training


def export_prepared(prepared: Prepared, report: ExportReport) -> torch.export.ExportedProgram:
    """:func:`export_program` of a :class:`Prepared` model; its notes go to ``report``."""
    report.notes.extend(prepared.notes)
    return export_program(prepared.module, prepared.example_inputs, prepared.dynamic_shapes, report)


def build(prepared: Prepared, path: str | None) -> ExportResult:
    report = ExportReport("export")
    ep = export_prepared(prepared, report)
    signature = prepared.signature(ep, example_device(prepared.example_inputs))
    report.census(ep)
    if path is not None:
        with report.stage("save"):
            torch.export.save(ep, path)
        report.artifact_bytes = file_size(path)
    module = ep.module()

    def run(*inputs: Any) -> list[torch.Tensor]:
        with torch.no_grad():
            return flat_outputs(module(*inputs))

    return ExportResult("export", ep, path, report, run, signature)
