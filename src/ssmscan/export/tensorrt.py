"""Target ``"tensorrt"``: ssmscan ops and scan HOPs lowered to plain aten at a static length,
compiled by Torch-TensorRT with nothing left for PyTorch fallback.

Three pieces:

* :func:`build` (``ssmscan.export(..., target="tensorrt")``): export, the ssmscan ops replaced by
  their parallel realization, ``associative_scan``/``scan`` HOPs lowered (``TENSORRT_PIPELINE``),
  ``run_decompositions()``, the constant factories it leaves (``full_like`` from the attention
  mask's ``_safe_softmax``) made ``aten.full`` at their static shape, then
  :func:`~ssmscan.passes.check_tensorrt_ready` against Torch-TensorRT 2.13's converter
  registry. A graph that is not ready raises :class:`NotTensorRTReady` naming the
  offending ops; a ready one is compiled with ``torch_tensorrt.dynamo.compile(min_block_size=1,
  require_full_compilation=True)`` where NVIDIA's TensorRT runtime and a CUDA GPU exist, and
  :class:`~ssmscan.export.TargetUnavailable` says what is missing otherwise.
* :func:`register_tensorrt_passes`: adds :func:`ssmscan_lower_scans` to Torch-TensorRT's
  post-lowering pass list (``_aten_lowering_pass``), so ``torch_tensorrt.compile`` /
  ``torch_tensorrt.dynamo.compile`` accept graphs holding ssmscan ops or scan HOPs directly.
  Torch-TensorRT runs its decompositions *before* the post-lowering passes, so the pass decomposes
  the nodes it creates with Torch-TensorRT's own table (e.g. ``aten.silu``, which has no converter).
* :func:`tensorrt_dry_run`: Torch-TensorRT's own lowering (its decompositions and post-lowering
  passes, ours registered) and its partitioner in dry-run mode, without building an engine;
  reports whether every op lands in TensorRT. Needs ``torch_tensorrt`` to import; on machines
  without TensorRT's libraries the tests import it through ``tools/trt_shim.py``.

TensorRT's runtime libraries are not obtainable on the CPU CI machines (PyPI carries only
placeholder ``tensorrt`` packages that download NVIDIA's libraries at install time), so engine
builds run only where TensorRT is installed.
"""

from __future__ import annotations

import logging
import types
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from ssmscan.passes import (
    TENSORRT_PIPELINE,
    TensorRTReadiness,
    check_tensorrt_ready,
    decompose_selective_scan,
    run_pipeline,
)
from ssmscan.passes import _graph as G

from ._common import (
    ExportReport,
    ExportResult,
    TargetUnavailable,
    example_device,
    file_size,
    flat_outputs,
    temp_artifact,
)
from ._experts import lower_experts
from ._prepare import Prepared
from .program import export_prepared, export_program

__all__ = [
    "NotTensorRTReady",
    "TensorRTDryRun",
    "build",
    "fill_static_factories",
    "register_tensorrt_passes",
    "ssmscan_lower_scans",
    "tensorrt_dry_run",
]

logger = logging.getLogger(__name__)

# Torch-TensorRT's remove_assert_nodes drops these before conversion (they have no converter).
_ASSERT_OPS = ("_assert_scalar", "_assert_tensor_metadata")


class NotTensorRTReady(RuntimeError):
    """The lowered graph still holds ops Torch-TensorRT cannot convert (listed in the message)."""


@dataclass
class TensorRTDryRun:
    """What Torch-TensorRT's partitioner would do with a model.

    Attributes:
        supported: converted ops and their counts (Torch-TensorRT's names).
        unsupported: ops left for PyTorch and their counts.
        engines: TensorRT blocks (``_run_on_acc_*`` submodules) the partitioner made.
        torch_blocks: blocks left to PyTorch (``_run_on_gpu_*`` submodules).
        readiness: :func:`~ssmscan.passes.check_tensorrt_ready` of the graph handed to the
            partitioner, against the converter registry only (no decompositions left to run).
        graph: that graph (after Torch-TensorRT's decompositions and post-lowering passes).
        report: export and lowering stages, census of ``graph``, decisions of the passes.
    """

    supported: dict[str, int]
    unsupported: dict[str, int]
    engines: int
    torch_blocks: int
    readiness: TensorRTReadiness
    graph: fx.GraphModule = field(repr=False)
    report: ExportReport = field(repr=False)

    @property
    def all_in_tensorrt(self) -> bool:
        """Every op converts and the partitioner made exactly one engine, no PyTorch block."""
        return not self.unsupported and self.engines == 1 and self.torch_blocks == 0


# --------------------------------------------------------------------------------------------
# The pass registered with Torch-TensorRT


def ssmscan_lower_scans(gm: fx.GraphModule, settings: Any = None) -> fx.GraphModule:
    """ssmscan ops / ``associative_scan`` / affine ``scan`` in, plain aten (Torch-TensorRT's
    decompositions applied) out; a Torch-TensorRT post-lowering pass ``(gm, settings) -> gm``.

    Ops it cannot lower (a dynamic length, a non-affine scan) are left and logged; with
    ``require_full_compilation=True`` Torch-TensorRT then refuses the graph.
    """
    lowered = decompose_selective_scan(gm, "parallel")
    scans = run_pipeline(gm, TENSORRT_PIPELINE)
    for d in (*lowered.decisions, *scans.decisions):
        (logger.debug if d.lowered else logger.warning)("ssmscan_lower_scans: %s", d)
    if lowered or scans:
        _redecompose_new_nodes(gm, _trt_decompositions(settings))
    return gm


def register_tensorrt_passes() -> bool:
    """Add :func:`ssmscan_lower_scans` to Torch-TensorRT's post-lowering passes (first, so its
    own clean-ups run after it). Idempotent; returns whether it was added by this call.

    Raises:
        TargetUnavailable: ``torch_tensorrt`` does not import here.

    Example (where torch_tensorrt and TensorRT exist)::

        register_tensorrt_passes()
        trt_model = torch_tensorrt.dynamo.compile(torch.export.export(model, (x,)), [x])
    """
    passes = _import_torch_tensorrt_lowering()
    manager = passes.ATEN_POST_LOWERING_PASSES
    if any(p is ssmscan_lower_scans for p in manager.passes):
        return False
    passes._aten_lowering_pass(ssmscan_lower_scans, index=0)
    return True


def _import_torch_tensorrt_lowering() -> types.ModuleType:
    try:
        # The function shares its module's name; the package's star import hides it.
        from torch_tensorrt.dynamo.lowering.passes import _aten_lowering_pass as passes
    except Exception as e:  # torch_tensorrt raises a bare Exception when libnvinfer is missing
        raise TargetUnavailable(
            f"torch_tensorrt does not import here ({type(e).__name__}: {e}); it needs NVIDIA's "
            "TensorRT libraries: pip install 'ssmscan[tensorrt]' where they can be installed"
        ) from e
    return passes


def _trt_decompositions(settings: Any) -> dict[Any, Any]:
    from torch_tensorrt.dynamo.lowering import get_decompositions

    return dict(
        get_decompositions(
            bool(getattr(settings, "enable_experimental_decompositions", False)),
            bool(getattr(settings, "decompose_attention", False)),
        )
    )


def _redecompose_new_nodes(gm: fx.GraphModule, table: dict[Any, Any]) -> None:
    """Decompose, with ``table``, every node a ssmscan pass created whose op is in ``table``."""
    changed = False
    for node in list(gm.graph.nodes):
        if (
            node.op == "call_function"
            and G.LOWERING_META in node.meta
            and isinstance(node.target, torch._ops.OpOverload)
            and node.target in table
        ):
            changed |= _retrace_node(gm, node, table)
    if changed:
        G.finish(gm, None)


def _retrace_node(gm: fx.GraphModule, node: fx.Node, table: dict[Any, Any]) -> bool:
    flat, spec = pytree.tree_flatten((node.args, node.kwargs))
    where = [i for i, a in enumerate(flat) if isinstance(a, fx.Node)]
    inputs = [flat[i] for i in where]
    vals = [n.meta.get("val") for n in inputs]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return False
    target = node.target
    assert callable(target)

    def call(*tensors: torch.Tensor) -> Any:
        leaves = list(flat)
        for i, t in zip(where, tensors):
            leaves[i] = t
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        return target(*args, **kwargs)

    traced = G.trace_on_fakes(call, vals, decomposition_table=table)
    G.insert_traced(gm, node, traced, inputs, dict(node.meta[G.LOWERING_META]), G.PROVENANCE,
                    f"decomposing {target}")  # fmt: skip
    return True


# --------------------------------------------------------------------------------------------
# Lowering inside ssmscan (the build and the dry run)


def lower_for_tensorrt(
    ep: torch.export.ExportedProgram, algorithm: str, report: ExportReport
) -> torch.export.ExportedProgram:
    """ssmscan ops -> parallel aten, scan HOPs -> aten, ``run_decompositions()``, assertion
    nodes dropped (as Torch-TensorRT's ``remove_assert_nodes`` does), constant factories at a
    static shape -> ``aten.full`` (:func:`fill_static_factories`); returns the new program."""
    lower_experts(ep, report)
    with report.stage("decompose"):
        res = decompose_selective_scan(ep, "parallel", algorithm)  # type: ignore[arg-type]
        low = run_pipeline(ep, TENSORRT_PIPELINE)
    report.realization = "parallel"
    report.notes.extend(str(d) for d in (*res.decisions, *low.decisions))
    with report.stage("run_decompositions"):
        ep = ep.run_decompositions()
    gm = ep.graph_module
    asserts = [
        n
        for n in gm.graph.nodes
        if n.op == "call_function"
        and isinstance(n.target, torch._ops.OpOverload)
        and n.target._opname in _ASSERT_OPS
        and not n.users
    ]
    for n in asserts:
        gm.graph.erase_node(n)
    if asserts:
        gm.graph.lint()
        gm.recompile()
        report.notes.append(
            f"dropped {len(asserts)} assertion node(s), as Torch-TensorRT's remove_assert_nodes does"
        )
    filled = fill_static_factories(gm)
    if filled:
        which = ", ".join(f"{name} x{count}" for name, count in sorted(filled.items()))
        report.notes.append(f"constant factories at a static shape -> aten.full: {which}")
    return ep


# Constant factories ``run_decompositions()`` leaves in models: torch's SDPA math decomposition
# (``_safe_softmax``: ``where(all_masked, zeros_like(p), p)``) gives ``full_like``, mask code
# ``new_ones``/``new_zeros``. Each is ``aten.full`` of its output's shape, dtype and device, with
# the fill value at this index of the node's args (``"arg"``) or this constant (``"value"``).
_FILLS: dict[Any, tuple[str, Any]] = {
    torch.ops.aten.full_like.default: ("arg", 1),
    torch.ops.aten.zeros_like.default: ("value", 0),
    torch.ops.aten.ones_like.default: ("value", 1),
    torch.ops.aten.new_full.default: ("arg", 2),
    torch.ops.aten.new_zeros.default: ("value", 0),
    torch.ops.aten.new_ones.default: ("value", 1),
}


def fill_static_factories(gm: fx.GraphModule) -> dict[str, int]:
    """``full_like`` / ``zeros_like`` / ``ones_like`` / ``new_full`` / ``new_zeros`` /
    ``new_ones`` of a static, contiguous, strided output in, ``aten.full`` of that shape, dtype
    and device out (same values, same strides); returns the rewritten ops and their counts.

    These factories have no Torch-TensorRT converter (its decompositions turn them into
    ``aten.full`` the same way); a node with a symbolic shape, another layout, strides other
    than contiguous, or a fill value computed in the graph is left as it is.

    Example:
        >>> import torch
        >>> class M(torch.nn.Module):
        ...     def forward(self, x):
        ...         return torch.where(x > 0, x, torch.full_like(x, -1.0))
        >>> ep = torch.export.export(M(), (torch.randn(1, 3),)).run_decompositions()
        >>> fill_static_factories(ep.graph_module)
        {'aten.full_like.default': 1}
        >>> ep.module()(torch.tensor([[1.0, -2.0, 3.0]])).tolist()
        [[1.0, -1.0, 3.0]]
    """
    counts: dict[str, int] = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _FILLS:
            continue
        full_args = _full_args(node)
        if full_args is None:
            continue
        shape, value, val = full_args
        with gm.graph.inserting_before(node):
            full = gm.graph.call_function(
                torch.ops.aten.full.default,
                (shape, value),
                {
                    "dtype": val.dtype,
                    "layout": torch.strided,
                    "device": val.device,
                    "pin_memory": False,
                },
            )
        full.meta.update(
            {k: node.meta[k] for k in ("nn_module_stack", "stack_trace") if k in node.meta}
        )
        full.meta["val"] = val
        node.replace_all_uses_with(full)
        gm.graph.erase_node(node)
        name = str(node.target)
        counts[name] = counts.get(name, 0) + 1
    if counts:
        gm.graph.lint()
        gm.recompile()
    return counts


def _full_args(node: fx.Node) -> tuple[list[int], Any, torch.Tensor] | None:
    """``(shape, fill value, output value)`` of ``aten.full`` giving what ``node`` gives, or
    ``None`` where it would not be the same tensor."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.layout != torch.strided:
        return None
    if not all(isinstance(s, int) for s in val.shape) or not val.is_contiguous():
        return None
    if node.kwargs.get("pin_memory"):
        return None
    where, fill = _FILLS[node.target]
    value = node.args[fill] if where == "arg" else fill
    if not isinstance(value, (bool, int, float)):
        return None
    return list(val.shape), value, val


def _verdict(readiness: TensorRTReadiness) -> str:
    if readiness.ready:
        return "check_tensorrt_ready: ready (every op in Torch-TensorRT 2.13's converter set)"
    parts = [
        f"{what}: {', '.join(ops)}"
        for what, ops in (
            ("higher-order ops", readiness.higher_order),
            ("constant factories without a converter", readiness.banned_factories),
            ("ops without a converter", readiness.unsupported),
        )
        if ops
    ]
    return "check_tensorrt_ready: not ready; " + "; ".join(parts)


def tensorrt_dry_run(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    algorithm: str = "auto",
    lower_first: bool = True,
) -> TensorRTDryRun:
    """What Torch-TensorRT would convert: its lowering and its partitioner, no engine built.

    Args:
        model: the model (exported in eval mode at the example inputs' static shapes).
        example_inputs: tuple of its positional inputs.
        algorithm: parallel scan algorithm for ssmscan's lowering.
        lower_first: lower with ssmscan's passes before handing the program to Torch-TensorRT
            (as :func:`build` does); ``False`` hands it the program with ssmscan ops and scan HOPs
            and relies on the registered pass alone.

    Returns:
        A :class:`TensorRTDryRun`; ``.all_in_tensorrt`` says whether every op lands in TensorRT.

    Raises:
        TargetUnavailable: ``torch_tensorrt`` does not import here.
    """
    register_tensorrt_passes()
    from torch_tensorrt._Device import Device
    from torch_tensorrt.dynamo import partitioning
    from torch_tensorrt.dynamo._settings import CompilationSettings
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import DYNAMO_CONVERTERS
    from torch_tensorrt.dynamo.lowering import (
        get_decompositions,
        post_lowering,
        pre_export_lowering,
    )

    report = ExportReport("tensorrt")
    ep = export_program(model, example_inputs, None, report)
    if lower_first:
        ep = lower_for_tensorrt(ep, algorithm, report)
    else:
        report.realization = "parallel"
        report.notes.append("lowered by ssmscan_lower_scans inside Torch-TensorRT's post-lowering")
    # The settings' default device asks CUDA for the current device: name one without CUDA.
    device = {} if torch.cuda.is_available() else {"device": Device("cuda:0")}
    settings = CompilationSettings(
        min_block_size=1, require_full_compilation=True, dryrun=True, **device
    )
    with report.stage("torch_tensorrt lowering"):
        ep = pre_export_lowering(ep, settings)
        ep = ep.run_decompositions(
            get_decompositions(
                settings.enable_experimental_decompositions, settings.decompose_attention
            )
        )
        gm = post_lowering(ep.module(), settings)
    report.census(gm)
    readiness = check_tensorrt_ready(gm, allow_decomposed=False)
    report.notes.append(_verdict(readiness))
    with report.stage("torch_tensorrt partition (dry run)"):
        DYNAMO_CONVERTERS.set_compilation_settings(settings)
        # require_full_compilation=False: list what would fall back instead of raising.
        parted, support = partitioning.fast_partition(
            gm, min_block_size=1, require_full_compilation=False
        )
    names = [name for name, _ in parted.named_children()]
    return TensorRTDryRun(
        supported=dict(support.supported_operators),
        unsupported=dict(support.unsupported_operators),
        engines=sum(n.startswith("_run_on_acc") for n in names),
        torch_blocks=sum(n.startswith("_run_on_gpu") for n in names),
        readiness=readiness,
        graph=gm,
        report=report,
    )


# --------------------------------------------------------------------------------------------
# The target


def _require_tensorrt_runtime(verdict: str) -> types.ModuleType:
    """``torch_tensorrt`` with NVIDIA's TensorRT runtime and a CUDA GPU, or TargetUnavailable
    (whose message starts with ``verdict``, what ssmscan checked without them)."""
    missing = []
    try:
        import tensorrt
    except ImportError as e:
        missing.append(f"NVIDIA's TensorRT runtime (import tensorrt: {e})")
    else:
        if getattr(getattr(tensorrt, "__spec__", None), "origin", None) is None:
            missing.append("NVIDIA's TensorRT runtime (the `tensorrt` module here is a stand-in)")
    try:
        import torch_tensorrt
    except Exception as e:  # torch_tensorrt raises a bare Exception when libnvinfer is missing
        missing.append(f"torch-tensorrt ({type(e).__name__}: {str(e).splitlines()[0]})")
    if not torch.cuda.is_available():
        missing.append("a CUDA GPU (torch.cuda.is_available() is False)")
    if missing:
        raise TargetUnavailable(
            f"target 'tensorrt' cannot build an engine here ({verdict}); missing: "
            + "; ".join(missing)
            + ". PyPI carries only placeholder `tensorrt` packages that download NVIDIA's "
            "libraries at install time; install TensorRT from NVIDIA (pip install tensorrt "
            "--extra-index-url https://pypi.nvidia.com) and 'ssmscan[tensorrt]' on a CUDA "
            "machine. Without them, ssmscan.export.tensorrt.tensorrt_dry_run(model, inputs) "
            "checks with Torch-TensorRT's partitioner that every op would convert."
        )
    return torch_tensorrt


def build(prepared: Prepared, path: str | None, algorithm: str) -> ExportResult:
    """Lower, check and (where TensorRT exists) compile the model; see the module docstring."""
    report = ExportReport("tensorrt")
    example_inputs = prepared.example_inputs
    ep = export_prepared(prepared, report)
    signature = prepared.signature(ep, example_device(example_inputs))
    ep = lower_for_tensorrt(ep, algorithm, report)
    report.census(ep)
    readiness = check_tensorrt_ready(ep)
    report.notes.append(_verdict(readiness))
    if not readiness.ready:
        raise NotTensorRTReady(
            "target 'tensorrt': after ssmscan's lowering the graph still holds ops Torch-TensorRT "
            f"cannot convert ({_verdict(readiness).split('; ', 1)[1]}); export with "
            "target='onnx' or 'aoti', or replace those ops in the model"
        )
    torch_tensorrt = _require_tensorrt_runtime(_verdict(readiness))
    register_tensorrt_passes()
    with report.stage("tensorrt compile"):
        trt_module = torch_tensorrt.dynamo.compile(
            ep,
            arg_inputs=list(example_inputs),
            min_block_size=1,
            require_full_compilation=True,
        )
    temp_dir = None
    if path is None:
        temp_dir, path = temp_artifact("tensorrt", "model.ep")
    with report.stage("save"):
        torch_tensorrt.save(
            trt_module, path, output_format="exported_program", arg_inputs=list(example_inputs)
        )
    report.artifact_bytes = file_size(path)

    def run(*inputs: Any) -> list[torch.Tensor]:
        with torch.no_grad():
            return flat_outputs(trt_module(*inputs))

    return ExportResult("tensorrt", trt_module, path, report, run, signature, temp_dir)
