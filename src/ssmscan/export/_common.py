"""What every export target shares: the result object, its report, stage timing, graph census."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._ops import HigherOrderOperator

from ._signature import Signature

TARGETS = ("export", "onnx", "aoti", "tensorrt", "executorch")


class TargetUnavailable(RuntimeError):
    """The target cannot run on this machine (a missing package, no GPU, no TensorRT runtime);
    the message says what is missing and how to get it."""


@dataclass
class ExportReport:
    """What an export did and produced.

    Attributes:
        target: the target name.
        realization: how the ssmscan ops were realized: ``"kernel"`` (kept as ssmscan ops),
            ``"parallel"`` (aten parallel scan) or ``"loop"`` (``higher_order.scan``).
        node_count: ``call_function`` nodes of the final graph (submodules included).
        op_counts: calls per op of the final graph.
        leftover_ops: calls that are neither aten ops nor ``getitem`` (ssmscan ops, higher-order
            ops, other custom ops), with their counts.
        stage_seconds: wall time of each stage, in order.
        artifact_bytes: size of the artifact file, when there is one.
        notes: decisions of the passes and anything else worth knowing.
    """

    target: str
    realization: str = "kernel"
    node_count: int = 0
    op_counts: dict[str, int] = field(default_factory=dict)
    leftover_ops: dict[str, int] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    artifact_bytes: int | None = None
    notes: list[str] = field(default_factory=list)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the enclosed block as stage ``name``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds[name] = time.perf_counter() - t0

    def census(self, program: Any) -> None:
        """Fill ``node_count``, ``op_counts`` and ``leftover_ops`` from ``program``'s graph.
        Size arithmetic (``operator.*``, ``torch.sym_*`` on symbolic sizes) and ``getitem`` are
        not leftovers: every backend that takes dynamic shapes evaluates them."""
        counts, size_math = op_census(program)
        self.op_counts = dict(counts)
        self.node_count = sum(self.op_counts.values())
        self.leftover_ops = {
            k: v
            for k, v in self.op_counts.items()
            if not is_plain_aten(k) and k != "getitem" and k not in size_math
        }

    def summary(self) -> str:
        """One line: target, realization, nodes, leftover ops, size, total time."""
        size = f", {self.artifact_bytes / 1e3:.0f} kB" if self.artifact_bytes is not None else ""
        left = ", ".join(f"{k} x{v}" for k, v in self.leftover_ops.items()) or "none"
        total = sum(self.stage_seconds.values())
        return (
            f"{self.target}: realization {self.realization}, {self.node_count} nodes, "
            f"leftover non-aten ops: {left}{size}, {total:.1f} s"
        )


@dataclass
class ExportResult:
    """An exported model: the artifact, where it lies, how to run it, its signature and the report.

    An artifact written to a temporary folder (no ``path`` given) belongs to the result: the
    folder is removed when the result is garbage-collected or the process exits. Pass ``path``
    to keep the artifact.

    Attributes:
        target: the target name.
        artifact: the ``ExportedProgram`` (``"export"``), the ``onnx.ModelProto``-producing
            ``torch.onnx.ONNXProgram`` (``"onnx"``), the loaded AOTInductor package (``"aoti"``),
            the compiled module (``"tensorrt"``) or the ExecuTorch program (``"executorch"``).
        path: the artifact file, for targets that write one (else ``None``).
        report: the :class:`ExportReport`.
        signature: the artifact's named inputs and outputs, dtypes, shapes (dynamic dimensions by
            name, with their ranges) and token-id ranges (:class:`Signature`).
    """

    target: str
    artifact: Any
    path: str | None
    report: ExportReport
    _runner: Callable[..., Sequence[torch.Tensor]] = field(repr=False, default=lambda *a: ())
    signature: Signature | None = None
    temp_dir: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.temp_dir is not None:
            weakref.finalize(self, shutil.rmtree, self.temp_dir, ignore_errors=True)

    def run(self, *inputs: Any) -> tuple[torch.Tensor, ...]:
        """Run the artifact on ``inputs`` (same structure as the example inputs); returns the
        outputs flattened (the artifact's outputs, in the order of ``signature.outputs``).

        Raises:
            TypeError: an input is not a tensor or has another dtype than the signature's.
            ValueError: another number of inputs, another rank or device, a size out of its
                range (or different from the export's where static), token ids out of range.
        """
        if self.signature is not None:
            flat = self.signature.check(inputs)
            if len(flat) == len(inputs):  # flat tensors: hand them over contiguous
                inputs = tuple(x.contiguous() for x in flat)
        return tuple(self._runner(*inputs))

    def describe(self) -> str:
        """The report's summary, the artifact's path and its signature, one item a line."""
        lines = [self.report.summary()]
        if self.path is not None:
            kept = " (temporary: removed with this result)" if self.temp_dir else ""
            lines.append(f"artifact: {self.path}{kept}")
        if self.signature is not None:
            lines.append(self.signature.describe())
        return "\n".join(lines)


def temp_artifact(target: str, filename: str) -> tuple[str, str]:
    """A fresh temporary folder ``ssmscan-<target>-*`` and the artifact path inside it."""
    folder = tempfile.mkdtemp(prefix=f"ssmscan-{target}-")
    return folder, os.path.join(folder, filename)


# Messages torch and onnxscript emit during every export that say nothing about the user's model:
# (logger, message prefix). Filtered by prefix so that any other record still gets through.
_NOISE_LOGS = (
    ("torch.onnx._internal.exporter._registration", "torchvision is not installed"),
    ("onnx_ir.passes.common.initializer_deduplication", "Skipped deduplication of initializer"),
    # every export at an opset newer than onnxscript's converter knows (27: LinearAttention)
    ("onnxscript.version_converter", "The model version conversion is not supported"),
)
_NOISE_WARNINGS = (r".*isinstance\(treespec, LeafSpec\).*",)


class _DropPrefix(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


@contextmanager
def quiet_known_noise() -> Iterator[None]:
    """Within the block, drop the known messages above (and only those); restored after."""
    added = []
    for name, prefix in _NOISE_LOGS:
        f = _DropPrefix(prefix)
        logging.getLogger(name).addFilter(f)
        added.append((name, f))
    try:
        with warnings.catch_warnings():
            for message in _NOISE_WARNINGS:
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        for name, f in added:
            logging.getLogger(name).removeFilter(f)


def flat_outputs(out: Any) -> list[torch.Tensor]:
    """The tensor leaves of a model's output pytree (dataclasses registered with torch.export
    included)."""
    return [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]


def target_name(target: Any) -> str:
    if isinstance(target, HigherOrderOperator):
        return f"higher_order.{target.__name__}"
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def op_census(program: Any) -> tuple[Counter[str], set[str]]:
    """Calls per op name over the graph and its submodules, and the names that are size
    arithmetic (Python ``operator`` functions, ``torch.sym_*``)."""
    gm = program.graph_module if isinstance(program, torch.export.ExportedProgram) else program
    counts: Counter[str] = Counter()
    size_math: set[str] = set()
    for mod in gm.modules():
        if isinstance(mod, fx.GraphModule):
            for node in mod.graph.nodes:
                if node.op == "call_function":
                    name = target_name(node.target)
                    counts[name] += 1
                    module = getattr(node.target, "__module__", None) or ""
                    if module in ("_operator", "operator", "math") or name.startswith("sym_"):
                        size_math.add(name)
    return counts, size_math


def is_plain_aten(name: str) -> bool:
    return name.startswith(("aten.", "prims.")) or name in ("sym_size", "sym_numel")


def file_size(path: str | None) -> int | None:
    if path is None or not os.path.exists(path):
        return None
    if os.path.isdir(path):
        return sum(
            os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files
        )
    return os.path.getsize(path)


def example_device(example_inputs: tuple[Any, ...]) -> torch.device:
    for x in pytree.tree_leaves(example_inputs):
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


def has_dynamic_dims(dynamic_shapes: Any) -> bool:
    """Whether a ``dynamic_shapes`` spec marks any dimension dynamic."""
    if dynamic_shapes is None:
        return False
    leaves = pytree.tree_leaves(dynamic_shapes, is_leaf=lambda x: x is None)
    return any(leaf is not None for leaf in leaves)
