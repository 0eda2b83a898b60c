"""``ssmscan report``'s rows: build each target, check it against eager, time it, format the table."""

from __future__ import annotations

import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ssmscan._cli_models import LoadedModel, dynamic_spec, first_tensor
from ssmscan._cli_util import (
    MODEL_TOLERANCE_FACTOR,
    STATIC_ONLY,
    SUFFIX,
)


@dataclass
class TargetResult:
    """One row of the report (all times in seconds except ``latency_ms``)."""

    target: str
    status: str = "ok"  # "ok" | "FAILED" | "unavailable"
    reason: str = ""
    shapes: str = "-"  # "dynamic L" | "static"
    realization: str = "-"
    leftover_ops: dict[str, int] | None = None
    max_abs_error: float | None = None
    rel_error: float | None = None
    checked_lengths: list[int] = field(default_factory=list)
    latency_ms: float | None = None  # the median
    latency_min_ms: float | None = None
    latency_p90_ms: float | None = None
    latency_all_ms: list[float] = field(default_factory=list)
    build_seconds: float | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    artifact_bytes: int | None = None
    path: str | None = None
    notes: list[str] = field(default_factory=list)


def _build(
    target: str, model: torch.nn.Module, ids: torch.Tensor, dynamic: bool, path: str | None
) -> tuple[Callable[[torch.Tensor], torch.Tensor], TargetResult]:
    """Build ``target``'s artifact; returns a runner ``ids -> first output`` and a partial row.

    Raises ``TargetUnavailable`` when the target cannot run here, anything else when it fails.
    """
    from ssmscan.export import TargetUnavailable, export
    from ssmscan.export.executorch import PlanTooLarge

    row = TargetResult(target)
    if target == "eager":
        row.realization, row.shapes, row.build_seconds = "kernel", "any", 0.0
        return (lambda x: first_tensor(model(x))), row
    if target == "compile":
        compiled = torch.compile(model, fullgraph=True, backend="inductor")
        # A copy carries the dynamic mark: marked on the caller's ids it would make every later
        # target's torch.export see a dynamic length (and TensorRT's static lowering decline).
        first = ids.clone()
        if dynamic:
            torch._dynamo.mark_dynamic(first, 1)
        t0 = time.perf_counter()
        with torch.no_grad():
            compiled(first)  # compiles
        row.build_seconds = time.perf_counter() - t0
        row.realization, row.shapes = "kernel", "dynamic L" if dynamic else "static"
        return (lambda x: first_tensor(compiled(x))), row
    if target == "tensorrt" and ids.device.type != "cuda" and torch.cuda.is_available():
        raise TargetUnavailable("TensorRT builds engines for CUDA GPUs; pass --device cuda")
    dynamic = dynamic and target not in STATIC_ONLY
    t0 = time.perf_counter()
    try:
        try:
            res = export(
                model, (ids,), target, dynamic_spec(ids.shape[1]) if dynamic else None, path=path
            )
        except PlanTooLarge as e:
            # ExecuTorch plans memory at the length's upper bound: where that plan does not fit
            # (attention's L x L scores), the row is built at the static length and says why
            if not dynamic:
                raise
            row.reason = f"built at a static length: {_one_line(e)}"
            dynamic = False
            res = export(model, (ids,), target, None, path=path)
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("ssmscan.export."):
            raise TargetUnavailable(f"this ssmscan has no {target} target yet ({e.name})") from e
        raise
    row.build_seconds = time.perf_counter() - t0
    rep = res.report
    row.realization, row.leftover_ops = rep.realization, dict(rep.leftover_ops)
    row.stage_seconds, row.artifact_bytes = dict(rep.stage_seconds), rep.artifact_bytes
    row.path, row.notes = res.path, list(rep.notes)
    row.shapes = "dynamic L" if dynamic else "static"
    return (lambda x: res.run(x)[0]), row


def _measure(
    run: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor, reps: int
) -> list[float]:
    sync = torch.cuda.synchronize if ids.device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        run(ids)  # warm-up
        sync()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            run(ids)
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def run_target(
    target: str,
    loaded: LoadedModel,
    ids: Sequence[torch.Tensor],
    refs: Sequence[torch.Tensor],
    dynamic: bool,
    reps: int,
    workdir: str,
) -> TargetResult:
    """Build, check and time one target; never raises (the row says what happened)."""
    from ssmscan.export import TargetUnavailable
    from ssmscan.testing import tolerance

    path = os.path.join(workdir, f"{target}{SUFFIX[target]}") if target in SUFFIX else None
    try:
        run, row = _build(target, loaded.module, ids[0], dynamic, path)
    except TargetUnavailable as e:
        return TargetResult(target, status="unavailable", reason=str(e))
    except Exception as e:
        return TargetResult(target, status="FAILED", reason=_one_line(e))
    # the build length, and a second one where the length is dynamic
    lengths = range(len(ids)) if row.shapes in ("dynamic L", "any") else range(1)
    try:
        with torch.no_grad():
            errs = [(run(ids[i]).cpu() - refs[i].cpu()).abs().max().item() for i in lengths]
            scale = max(refs[i].abs().max().item() for i in lengths) or 1.0
        row.checked_lengths = [ids[i].shape[1] for i in lengths]
        row.max_abs_error = max(errs)
        row.rel_error = row.max_abs_error / scale
        row.latency_all_ms = _measure(run, ids[0], reps)
        row.latency_ms = statistics.median(row.latency_all_ms)
        row.latency_min_ms = min(row.latency_all_ms)
        row.latency_p90_ms = p90(row.latency_all_ms)
    except Exception as e:
        row.status, row.reason = "FAILED", f"running it: {_one_line(e)}"
        return row
    tol = MODEL_TOLERANCE_FACTOR * tolerance(refs[0].dtype)
    if not row.rel_error <= tol:  # NaN fails too
        row.status = "FAILED"
        row.reason = (
            f"max abs error {row.max_abs_error:.2e} ({row.rel_error:.1e} of max|logits|) "
            f"exceeds {tol:.0e}"
        )
    return row


def p90(times: Sequence[float]) -> float:
    """The 90th percentile (nearest rank: the smallest value with 90% of ``times`` at or below)."""
    ordered = sorted(times)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


# Above this p90 / min ratio of a row's latencies the report warns that its timings are noise.
WIDE_SPREAD = 2.0


def spread_warning(rows: Sequence[TargetResult]) -> str:
    """A warning naming the rows whose latencies spread widely (p90 / min above
    :data:`WIDE_SPREAD`), or ``""``."""
    wide = [
        (r.target, r.latency_p90_ms / r.latency_min_ms)
        for r in rows
        if r.latency_min_ms
        and r.latency_p90_ms is not None
        and r.latency_p90_ms > WIDE_SPREAD * r.latency_min_ms
    ]
    if not wide:
        return ""
    which = ", ".join(f"{t} {ratio:.1f}x" for t, ratio in wide)
    return (
        f"warning: latencies spread widely between runs (p90/min: {which}); the machine is "
        "busy, so compare medians with care (rerun on an idle machine or with more --reps)"
    )


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _fmt_ms(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.2f}"


def _fmt_size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


# What a target's artifact made of the non-aten ops its exported program held: these are not
# leftovers, the target runs them natively.
BECAME = {
    "onnx": {"higher_order.scan": ("scan", "ONNX Scan")},
    "aoti": {"higher_order.scan": ("scan", "C++ loop")},
    "executorch": {
        "higher_order.scan": ("scan", "ExecuTorch loop"),
        "higher_order.executorch_call_delegate": ("delegate", "XNNPACK"),
    },
}


def _fmt_left(row: TargetResult) -> str:
    """The non-aten ops cell: ``op xN`` for a true leftover, ``op xN -> what`` for an op the
    target turned into its own construct."""
    if row.leftover_ops is None:
        return "-"
    became = BECAME.get(row.target, {})
    cells = []
    for op, n in row.leftover_ops.items():
        short, what = became.get(op, (op, None))
        cells.append(f"{short} x{n}" + (f" -> {what}" if what else ""))
    return ", ".join(cells) or "none"


def format_report(rows: Sequence[TargetResult]) -> str:
    """The report table (Markdown, aligned) followed by one line per target that did not run.

    The non-aten ops column names what each target made of its exported program's non-aten ops:
    ``scan x2 -> ONNX Scan`` (ONNX's loop operator), ``-> C++ loop`` (AOTInductor), ``->
    ExecuTorch loop``; a bare name is a true leftover (``export``'s program calls the ssmscan
    ops, so loading it needs ssmscan). Latencies: min, median and p90 of the timed runs."""
    head = [
        "target",
        "status",
        "shapes",
        "realization",
        "non-aten ops",
        "max abs err",
        "min ms",
        "median ms",
        "p90 ms",
        "build s",
        "size",
    ]
    body = []
    for r in rows:
        body.append(
            [
                r.target,
                r.status,
                r.shapes,
                r.realization,
                _fmt_left(r),
                "-"
                if r.max_abs_error is None
                else "0 (ref)"
                if r.target == "eager"
                else f"{r.max_abs_error:.1e}"
                if r.max_abs_error
                else "0",
                _fmt_ms(r.latency_min_ms),
                _fmt_ms(r.latency_ms),
                _fmt_ms(r.latency_p90_ms),
                "-" if r.build_seconds is None else f"{r.build_seconds:.1f}",
                _fmt_size(r.artifact_bytes),
            ]
        )
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(b) for b in body]
    reasons = [f"  {r.target}: {r.status}: {r.reason}" for r in rows if r.reason]
    return "\n".join(out + (["", *reasons] if reasons else []))


def versions() -> dict[str, str | None]:
    import ssmscan

    out: dict[str, str | None] = {
        "ssmscan": ssmscan.__version__,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
    }
    for name in ("onnxruntime", "onnx", "onnxscript", "transformers", "executorch"):
        try:
            from importlib.metadata import version

            out[name] = version(name)
        except Exception:  # not installed
            out[name] = None
    return out


def machine_info() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
