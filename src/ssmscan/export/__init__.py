"""``ssmscan.export``: one front door to every deployment target.

The package is callable: ``ssmscan.export(model, example_inputs, target=...)`` is
:func:`export`, and its target modules stay reachable (``ssmscan.export.tensorrt``,
``ssmscan.export.onnx``...; imported on first use).

One module per target: :mod:`.program` (``"export"``), :mod:`.onnx`, :mod:`.aoti`,
:mod:`.tensorrt`, :mod:`.executorch`; what they share lives in :mod:`._common`, the exported
signature in :mod:`._signature`, the wrapping of the model in :mod:`._prepare`.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

import torch

from ._common import (
    TARGETS,
    ExportReport,
    ExportResult,
    TargetUnavailable,
    has_dynamic_dims,
    quiet_known_noise,
)
from ._signature import Signature, TensorSpec

__all__ = [
    "TARGETS",
    "ExportReport",
    "ExportResult",
    "Signature",
    "TargetUnavailable",
    "TensorSpec",
    "export",
]

_REALIZATIONS = (None, "parallel", "loop")
_SUBMODULES = ("program", "onnx", "aoti", "tensorrt", "executorch")
_DYNAMIC_BATCH_TARGETS = ("export", "onnx", "aoti")


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
    dynamic_batch: bool | None = None,
    stateful: bool = False,
    onnx_linear_attention: bool = False,
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
        path: where to write the artifact (when omitted: a temporary folder owned by the result,
            removed when the result is garbage-collected or the process exits; ignored by
            ``"export"`` unless given, which then saves the program with ``torch.export.save``).
        realization: how the ssmscan ops become plain graphs for targets that cannot run them:
            ``"loop"`` (``higher_order.scan``, any length), ``"parallel"`` (aten parallel scan,
            static length); ``None`` picks per target (onnx/aoti-CPU/executorch: loop;
            tensorrt: parallel; aoti-CUDA and export: keep the ops).
        algorithm: parallel scan algorithm for ``realization="parallel"``.
        opset: ONNX opset (``None``: the exporter's default).
        dynamic_batch: make dimension 0 of every input a dynamic ``Dim("batch", min=1)``
            (unless ``dynamic_shapes`` sets it); ``None``: on for ``"export"``, ``"onnx"`` and
            ``"aoti"``, off for ``"tensorrt"`` and ``"executorch"`` (static batch).
        stateful: for a built-in ``ssmscan.models.MambaLM`` or ``Mamba2LM``: export
            ``(input_ids, conv_state_0.., ssm_state_0..) -> (logits, next_conv_state_0..,
            next_ssm_state_0..)`` to continue from a previous call (zero states when the example
            inputs carry none). Without it such a model exports as ``input_ids -> logits``.
        onnx_linear_attention: target ``"onnx"`` only: each Mamba-2 SSD scan
            (``ssmscan.ssd_scan``) becomes one ONNX ``LinearAttention`` node (opset 27,
            ``update_rule="gated"``: q = C, k = B, v = dt*x, decay = dt*A per head) instead of
            a ``Scan`` loop; ``opset`` defaults to 27. Raises ``ValueError`` for what the
            operator cannot express (``seq_idx``, float64) and for a model without an SSD scan.

    The artifact takes and returns plain tensors: any other model's outputs are flattened to
    their tensor leaves (named ``output``, or ``output_<path>`` for several), so it loads where
    ssmscan is not installed. Known noise of torch's and onnxscript's exporters is silenced
    during the call (and only then).

    Returns:
        An :class:`ExportResult`: ``.artifact``, ``.path``, ``.run(*inputs)`` (checks the
        inputs against the signature, returns the flat tuple of output tensors),
        ``.signature`` (:class:`Signature`: named inputs/outputs, dtypes, shapes with named
        dynamic dimensions and their ranges, token-id ranges), ``.describe()`` (report summary,
        path and signature as text) and ``.report`` (:class:`ExportReport`: node counts,
        leftover non-aten ops, realization, time of each stage, artifact size).

    Raises:
        ValueError: an unknown target/realization, or a combination that cannot work (a dynamic
            length with ``realization="parallel"`` or with ``"tensorrt"``, ``dynamic_batch=True``
            with a static-batch target, ``stateful=True`` for a model that is not a ``MambaLM``),
            naming the alternative.
        TargetUnavailable: the target's packages or hardware are missing here; says what to install.
        ssmscan.export.tensorrt.NotTensorRTReady: the lowered graph still holds ops Torch-TensorRT
            cannot convert (listed in the message).

    Example:
        >>> import torch, ssmscan
        >>> from ssmscan.models import build_model
        >>> model = build_model("tiny")
        >>> ids = torch.randint(0, 256, (1, 9))
        >>> res = ssmscan.export(model, (ids,), target="export")
        >>> print(res.signature.describe())
        inputs:  input_ids: int64[batch, 9] in [0, 256)
        outputs: logits: float32[batch, 9, 256]
        dims:    batch >= 1
        >>> logits = res.run(torch.cat([ids, ids, ids]))[0]
        >>> torch.allclose(logits[2:], model(ids)[0], atol=1e-5)
        True
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}; got {target!r}")
    if realization not in _REALIZATIONS:
        raise ValueError(f"realization must be one of {_REALIZATIONS}; got {realization!r}")
    if dynamic_batch is None:
        dynamic_batch = target in _DYNAMIC_BATCH_TARGETS
    elif dynamic_batch and target not in _DYNAMIC_BATCH_TARGETS:
        raise ValueError(
            f"target {target!r} exports a static batch; dynamic_batch=True applies to "
            f"{', '.join(_DYNAMIC_BATCH_TARGETS)}"
        )
    if onnx_linear_attention and target != "onnx":
        raise ValueError(
            f"onnx_linear_attention=True applies to target 'onnx' (an ONNX LinearAttention "
            f"node); got target {target!r}"
        )
    with quiet_known_noise():
        return _export(
            model,
            example_inputs,
            target,
            dynamic_shapes,
            path,
            realization,
            algorithm,
            opset,
            dynamic_batch,
            stateful,
            onnx_linear_attention,
        )


def _export(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    target: str,
    dynamic_shapes: Any,
    path: str | None,
    realization: str | None,
    algorithm: str,
    opset: int | None,
    dynamic_batch: bool,
    stateful: bool,
    onnx_linear_attention: bool,
) -> ExportResult:
    if target == "export" and realization is not None:
        raise ValueError(
            "target 'export' keeps the ssmscan ops; realization applies to onnx, aoti, "
            "tensorrt and executorch (or run ssmscan.passes.decompose_selective_scan yourself)"
        )
    dynamic = has_dynamic_dims(dynamic_shapes)
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
    from ._prepare import prepare  # imports torch.export: not at ``import ssmscan``

    prepared = prepare(model, example_inputs, dynamic_shapes, dynamic_batch, stateful)
    if target == "export":
        from . import program

        return program.build(prepared, path)
    if target == "onnx":
        from . import onnx

        return onnx.build(
            prepared, path, realization, algorithm, opset, dynamic, onnx_linear_attention
        )
    if target == "aoti":
        from . import aoti

        return aoti.build(prepared, path, realization, algorithm)
    if target == "tensorrt":
        from . import tensorrt

        return tensorrt.build(prepared, path, algorithm)
    from . import executorch

    return executorch.build(prepared, path, realization, algorithm, dynamic)


def __getattr__(name: str) -> Any:
    """The target modules, imported on first use (``ssmscan.export.tensorrt``...)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    """``ssmscan.export`` itself: the package, callable as :func:`export`."""

    def __call__(
        self, model: torch.nn.Module, example_inputs: tuple[Any, ...], *args: Any, **kwargs: Any
    ) -> ExportResult:
        return export(model, example_inputs, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
