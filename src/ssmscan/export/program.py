"""Target ``"export"``: a ``torch.export`` program that keeps the ssmscan ops (realization 1).

For users who load ssmscan where the program runs; also the first stage of every other target.
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import ExportReport, ExportResult, file_size, flat_outputs


def export_program(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    dynamic_shapes: Any,
    report: ExportReport,
) -> torch.export.ExportedProgram:
    """``torch.export.export`` of ``model`` in eval mode (the stage ``"export"`` of ``report``)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    if not isinstance(example_inputs, tuple):
        raise TypeError(
            f"example_inputs must be a tuple of the model's positional inputs; got "
            f"{type(example_inputs).__name__}"
        )
    was_training = model.training
    model.eval()
    try:
        with report.stage("export"):
            return torch.export.export(model, example_inputs, dynamic_shapes=dynamic_shapes)
    finally:
        model.train(was_training)


def build(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    dynamic_shapes: Any,
    path: str | None,
) -> ExportResult:
    report = ExportReport("export")
    ep = export_program(model, example_inputs, dynamic_shapes, report)
    report.census(ep)
    if path is not None:
        with report.stage("save"):
            torch.export.save(ep, path)
        report.artifact_bytes = file_size(path)
    module = ep.module()

    def run(*inputs: Any) -> list[torch.Tensor]:
        with torch.no_grad():
            return flat_outputs(module(*inputs))

    return ExportResult("export", ep, path, report, run)
