"""``ssmscan.export``: one front door to every deployment target.

One module per target: :mod:`.program` (``"export"``), :mod:`.onnx`, :mod:`.aoti`,
:mod:`.tensorrt`, :mod:`.executorch`; what they share lives in :mod:`._common`.
"""

from __future__ import annotations

from typing import Any

import torch

from ._common import TARGETS, ExportReport, ExportResult, TargetUnavailable, has_dynamic_dims

__all__ = ["TARGETS", "ExportReport", "ExportResult", "TargetUnavailable", "export"]

_REALIZATIONS = (None, "parallel", "loop")


def export(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    target: str = "export",
    dynamic_shapes: Any = None,
    *,
    path: str | None = None,
    realization: str | None = None,
    algorithm: str = "auto",
    opset: int | None = None,
) -> ExportResult:
    """Export ``model`` for ``target`` and return the artifact, a runner and a report.

    Options are explicit keywords (no ``**options``: see STYLE.md).

    Args:
        model: a ``torch.nn.Module`` (exported in eval mode; its mode is restored afterwards).
        example_inputs: tuple of the model's positional inputs.
        target: ``"export"`` (an ``ExportedProgram`` keeping the ssmscan ops; load ssmscan to run
            it), ``"onnx"`` (ONNX file, checked with ONNX Runtime), ``"aoti"`` (AOTInductor
            ``.pt2`` package that runs without ssmscan), ``"tensorrt"`` (Torch-TensorRT, static
            shapes), ``"executorch"`` (``.pte``).
        dynamic_shapes: as for ``torch.export.export`` (e.g. ``{"input_ids": {1: Dim("L")}}``).
        path: where to write the artifact (a temporary directory when omitted; ignored by
            ``"export"`` unless given, which then saves the program with ``torch.export.save``).
        realization: how the ssmscan ops become plain graphs for targets that cannot run them:
            ``"loop"`` (``higher_order.scan``, any length), ``"parallel"`` (aten parallel scan,
            static length); ``None`` picks per target (onnx/aoti-CPU/executorch: loop;
            tensorrt: parallel; aoti-CUDA and export: keep the ops).
        algorithm: parallel scan algorithm for ``realization="parallel"``.
        opset: ONNX opset (``None``: the exporter's default).

    Returns:
        An :class:`ExportResult`: ``.artifact``, ``.path``, ``.run(*inputs)`` (flat tuple of
        output tensors) and ``.report`` (:class:`ExportReport`: node counts, leftover non-aten
        ops, realization, time of each stage, artifact size).

    Raises:
        ValueError: an unknown target/realization, or a combination that cannot work (a dynamic
            length with ``realization="parallel"`` or with ``"tensorrt"``), naming the alternative.
        TargetUnavailable: the target's packages or hardware are missing here; says what to install.
        ssmscan.export.tensorrt.NotTensorRTReady: the lowered graph still holds ops Torch-TensorRT
            cannot convert (listed in the message).

    Example:
        >>> import torch, ssmscan
        >>> from ssmscan.models import build_model
        >>> model = build_model("tiny")
        >>> ids = torch.randint(0, 256, (1, 9))
        >>> res = ssmscan.export(model, (ids,), target="export")
        >>> logits = res.run(ids)[0]
        >>> torch.allclose(logits, model(ids)[0], atol=1e-5)
        True
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}; got {target!r}")
    if realization not in _REALIZATIONS:
        raise ValueError(f"realization must be one of {_REALIZATIONS}; got {realization!r}")
    if target == "export":
        from . import program

        if realization is not None:
            raise ValueError(
                "target 'export' keeps the ssmscan ops; realization applies to onnx, aoti, "
                "tensorrt and executorch (or run ssmscan.passes.decompose_selective_scan yourself)"
            )
        return program.build(model, example_inputs, dynamic_shapes, path)
    if target == "onnx":
        from . import onnx

        return onnx.build(
            model, example_inputs, dynamic_shapes, path, realization, algorithm, opset
        )
    if target == "aoti":
        from . import aoti

        return aoti.build(model, example_inputs, dynamic_shapes, path, realization, algorithm)
    if target == "tensorrt":
        if has_dynamic_dims(dynamic_shapes):
            raise ValueError(
                "target 'tensorrt' needs static shapes: ssmscan lowers the scans to a parallel "
                "aten scan planned for one length, and TensorRT has no loop for them. Export at "
                "a fixed length, or use target='onnx' or 'aoti' (loop realization, any length)."
            )
        if realization == "loop":
            raise ValueError(
                "target 'tensorrt' cannot take realization='loop' (Torch-TensorRT has no converter "
                "for higher_order.scan); use realization='parallel' or None"
            )
        from . import tensorrt

        return tensorrt.build(model, example_inputs, path, algorithm)
    from . import executorch

    return executorch.build(model, example_inputs, dynamic_shapes, path, realization, algorithm)
