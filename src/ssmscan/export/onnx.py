"""Target ``"onnx"``: ssmscan ops realized as aten (loop by default), the dynamo ONNX exporter,
checked with ONNX Runtime.

The loop realization becomes an ONNX ``Scan`` and keeps a dynamic length; the parallel one is
plain aten at a static length. On 2 CPU cores at batch 1, dim 128, N 16, L 1024 the loop ran in
ONNX Runtime in 10.7 ms and the parallel form in 21 ms (``passes/decompose_selective_scan.py``),
hence the default.

With ``linear_attention=True`` each Mamba-2 SSD scan (``ssmscan::ssd_scan_fwd``) becomes one ONNX
``LinearAttention`` node (opset 27, ``update_rule="gated"``; :mod:`._linear_attention`) instead of
a ``Scan``; the other scans keep their realization.
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.utils._pytree as pytree

from ._common import ExportReport, ExportResult, TargetUnavailable, file_size, temp_artifact
from ._experts import lower_experts
from ._lowering import lower_for_loop_backends
from ._prepare import Prepared
from ._signature import Signature
from .program import export_prepared


def _require_onnx() -> Any:
    try:
        import onnx  # noqa: F401
        import onnxruntime
        import onnxscript  # noqa: F401
    except ImportError as e:
        raise TargetUnavailable(
            f"target 'onnx' needs onnx, onnxscript and onnxruntime ({e}); "
            "install them with: pip install 'ssmscan[onnx]'"
        ) from e
    return onnxruntime


def _name_dims(onnx_program: Any, signature: Signature, ep: torch.export.ExportedProgram) -> None:
    """Rename the exporter's symbolic dimensions (``s33``) after the signature's (``batch``)
    on every value of the ONNX graph, subgraphs included."""
    import onnx_ir as ir

    rename: dict[str, str] = {}
    nodes = {n.name: n for n in ep.graph.nodes}
    for spec, ph in zip(signature.inputs, ep.graph_signature.user_inputs, strict=True):
        for size, name in zip(nodes[ph].meta["val"].shape, spec.shape, strict=True):
            if isinstance(size, torch.SymInt) and isinstance(name, str):
                rename[str(size.node.expr)] = name
    if not rename:
        return
    pattern = re.compile(r"\b(" + "|".join(re.escape(k) for k in rename) + r")\b")

    def fix(value: Any) -> None:
        shape = value.shape
        if shape is None:
            return
        dims = [
            pattern.sub(lambda m: rename[m.group(0)], d.value)
            if isinstance(d, ir.SymbolicDim) and d.value is not None
            else d
            for d in shape.dims
        ]
        if dims != list(shape.dims):
            value.shape = ir.Shape(dims)

    graph = onnx_program.model.graph
    for v in (*graph.inputs, *graph.outputs):
        fix(v)
    for node in ir.traversal.RecursiveGraphIterator(graph):
        for v in (*node.inputs, *node.outputs):
            if v is not None:
                fix(v)


def build(
    prepared: Prepared,
    path: str | None,
    realization: str | None,
    algorithm: str,
    opset: int | None,
    dynamic: bool,
    linear_attention: bool = False,
) -> ExportResult:
    ort = _require_onnx()
    realization = realization or "loop"
    if linear_attention:
        from . import _linear_attention as la

        if opset is None:
            opset = la.LINEAR_ATTENTION_OPSET
        elif opset < la.LINEAR_ATTENTION_OPSET:
            raise ValueError(
                f"onnx_linear_attention=True needs opset >= {la.LINEAR_ATTENTION_OPSET} "
                f"(LinearAttention is an opset-{la.LINEAR_ATTENTION_OPSET} operator); got "
                f"opset={opset}"
            )
    if realization == "parallel" and dynamic:
        raise ValueError(
            "target 'onnx' with realization='parallel' needs static shapes (the parallel scan is "
            "planned for one length); got dynamic_shapes. Use realization='loop' (an ONNX Scan, "
            "any length) or export at a fixed length."
        )
    report = ExportReport("onnx")
    ep = export_prepared(prepared, report)
    signature = prepared.signature(ep, torch.device("cpu"))
    table = None
    if linear_attention:
        with report.stage("linear attention"), torch.no_grad():
            notes = la.rewrite_ssd_scan(ep)
        if not notes:
            raise ValueError(
                "onnx_linear_attention=True applies to models that call ssmscan.ssd_scan "
                "(Mamba-2); this model has no ssd_scan node"
            )
        report.notes.extend(notes)
        table = la.translation_table()
    lower_for_loop_backends(ep, realization, algorithm, report)
    lower_experts(ep, report)
    report.census(ep)
    with report.stage("onnx"):
        onnx_program = torch.onnx.export(
            ep,
            dynamo=True,
            opset_version=opset,
            verbose=False,
            input_names=signature.input_names,
            output_names=signature.output_names,
            custom_translation_table=table,
        )
    if onnx_program is None:  # only the legacy (dynamo=False) exporter returns None
        raise RuntimeError("torch.onnx.export(dynamo=True) returned no ONNXProgram")
    if linear_attention:
        la.finalize(onnx_program.model)
    _name_dims(onnx_program, signature, ep)
    temp_dir = None
    if path is None:
        temp_dir, path = temp_artifact("onnx", "model.onnx")
    with report.stage("save"):
        onnx_program.save(path)
    report.artifact_bytes = file_size(path)
    with report.stage("onnxruntime session"):
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(*inputs: Any) -> list[torch.Tensor]:
        flat = [x for x in pytree.tree_leaves(inputs) if isinstance(x, torch.Tensor)]
        if len(flat) != len(names):
            raise ValueError(
                f"the ONNX model takes {len(names)} inputs ({names}); got {len(flat)} tensors"
            )
        feeds = {n: x.detach().cpu().numpy() for n, x in zip(names, flat, strict=True)}
        return [torch.from_numpy(y) for y in session.run(None, feeds)]

    return ExportResult("onnx", onnx_program, path, report, run, signature, temp_dir)
