"""Realizing ssmscan ops for targets that cannot run them (onnx, aoti on CPU, executorch)."""

from __future__ import annotations

import torch

from ssmscan.passes import LOOP_BACKEND_PIPELINE, decompose_selective_scan, run_pipeline

from ._common import ExportReport


def lower_for_loop_backends(
    ep: torch.export.ExportedProgram, realization: str, algorithm: str, report: ExportReport
) -> None:
    """ssmscan ops -> ``realization``; remaining ``associative_scan`` HOPs -> parallel aten."""
    with report.stage("decompose"):
        res = decompose_selective_scan(ep, realization, algorithm)  # type: ignore[arg-type]
        low = run_pipeline(ep, LOOP_BACKEND_PIPELINE)
    report.realization = realization
    for d in (*res.decisions, *low.decisions):
        report.notes.append(f"{d}")
