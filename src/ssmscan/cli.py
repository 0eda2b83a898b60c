"""The ``ssmscan`` command line: ``report``, ``export`` and ``bench``, thin over the library.

    ssmscan report [--model tiny] [--targets eager,compile,...] [--seq-len 256] [--json out.json]
    ssmscan export --model tiny --target onnx -o model.onnx
    ssmscan bench [--device cpu] [--lengths 128 512 2048] [--out DIR]

Results go to stdout, progress to stderr. Exit codes: 0 success, 1 a target that could run here
failed (``report``), 2 bad arguments (a one-line message on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

import torch

ALL_TARGETS = ("eager", "compile", "export", "aoti", "onnx", "tensorrt", "executorch")
EXPORT_TARGETS = ("export", "onnx", "aoti", "tensorrt", "executorch")
STATIC_ONLY = frozenset({"tensorrt"})  # the parallel realization is planned for one length
SUFFIX = {
    "export": ".pt2",
    "aoti": ".pt2",
    "onnx": ".onnx",
    "tensorrt": ".ep",
    "executorch": ".pte",
}
# A whole model compounds the op's rounding over its layers: 10x the op's float32 tolerance.
MODEL_TOLERANCE_FACTOR = 10.0


class UsageError(Exception):
    """Bad command-line input: reported as one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``prog: error: message (see --help)``), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _ticking(label: str, every: float = 10.0) -> Iterator[None]:
    """Print ``label ...`` now and ``label ... N s`` every ``every`` seconds until done."""
    _progress(f"{label} ...")
    t0, done = time.perf_counter(), threading.Event()

    def tick() -> None:
        while not done.wait(every):
            _progress(f"{label} ... {time.perf_counter() - t0:.0f} s")

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _quiet_known_noise() -> None:
    """Silence messages that say nothing about the user's model (torch's ONNX registry about
    torchvision, pytree's LeafSpec deprecation raised inside torch's own export code)."""
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")


# --- models -----------------------------------------------------------------------------------


@dataclass
class LoadedModel:
    """A model ready for the report: a module taking (batch, L) int64 ids, and its vocabulary."""

    name: str
    module: torch.nn.Module
    vocab_size: int


class _LogitsOnly(torch.nn.Module):
    """Wraps a transformers causal LM: ``input_ids -> logits`` (no cache), for export."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, use_cache=False).logits


def _hf_tiny() -> LoadedModel:
    try:
        import transformers

        from ssmscan.integrations.transformers import use_ssmscan
    except ImportError as e:
        raise UsageError(
            f"model 'hf-tiny' needs transformers ({e}); install it with: pip install 'ssmscan[hf]'"
        ) from None
    cfg = transformers.MambaConfig(
        vocab_size=256, hidden_size=64, state_size=16, num_hidden_layers=2, expand=2
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.MambaForCausalLM(cfg)
    return LoadedModel("hf-tiny", _LogitsOnly(use_ssmscan(model)).eval(), cfg.vocab_size)


def _vocab_size(module: torch.nn.Module) -> int | None:
    for owner in (getattr(module, "config", None), module):
        v = getattr(owner, "vocab_size", None)
        if isinstance(v, int) and v > 0:
            return v
    for m in module.modules():
        if isinstance(m, torch.nn.Embedding):
            return m.num_embeddings
    return None


def _from_file(spec: str) -> LoadedModel:
    path, _, factory_name = spec.rpartition(":")
    if not path.endswith(".py") or not factory_name.isidentifier():
        raise UsageError(f"--model {spec!r}: expected tiny, hf-tiny or path/to/file.py:factory")
    if not os.path.isfile(path):
        raise UsageError(f"--model {spec!r}: no such file {path!r}")
    mod_spec = importlib.util.spec_from_file_location(f"_ssmscan_user_model_{os.getpid()}", path)
    if mod_spec is None or mod_spec.loader is None:
        raise UsageError(f"--model {spec!r}: cannot load {path!r} as a Python module")
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except Exception as e:
        raise UsageError(
            f"--model {spec!r}: importing {path} raised {type(e).__name__}: {e}"
        ) from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise UsageError(f"--model {spec!r}: {path} has no callable {factory_name!r}")
    try:
        model = factory()
    except Exception as e:
        raise UsageError(
            f"--model {spec!r}: {factory_name}() raised {type(e).__name__}: {e}"
        ) from None
    if not isinstance(model, torch.nn.Module):
        raise UsageError(
            f"--model {spec!r}: {factory_name}() must return a torch.nn.Module; got "
            f"{type(model).__name__}"
        )
    vocab = _vocab_size(model)
    if vocab is None:
        raise UsageError(
            f"--model {spec!r}: cannot tell the vocabulary size (the model takes (batch, L) int64 "
            "token ids: give it a vocab_size attribute, a config.vocab_size, or an nn.Embedding)"
        )
    return LoadedModel(spec, model.eval(), vocab)


def load_model(spec: str) -> LoadedModel:
    """``tiny`` (or another ``MambaConfig`` preset), ``hf-tiny`` or ``path/to/file.py:factory``.

    Args:
        spec: the ``--model`` argument. A factory is called with no arguments and returns an
            ``nn.Module`` whose forward takes (batch, L) int64 token ids; the first tensor of its
            output (a pytree) is compared across targets.

    Returns:
        A :class:`LoadedModel` in eval mode, float32, on CPU, seeded.

    Raises:
        UsageError: an unknown name, a bad ``file.py:factory``, or transformers missing for
            ``hf-tiny``.
    """
    from ssmscan.models import MambaConfig, build_model

    if spec == "hf-tiny":
        return _hf_tiny()
    if spec in MambaConfig.PRESETS:
        model = build_model(spec).eval()
        return LoadedModel(spec, model, model.config.vocab_size)
    if ":" in spec:
        return _from_file(spec)
    raise UsageError(
        f"unknown model {spec!r}: expected hf-tiny, a preset ({', '.join(MambaConfig.PRESETS)}) "
        "or path/to/file.py:factory"
    )


def _load_on(spec: str, device: str) -> LoadedModel:
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU here")
    loaded = load_model(spec)
    loaded.module.to(device)
    return loaded


def _parse_targets(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UsageError("--targets is empty")
    unknown = [t for t in names if t not in ALL_TARGETS]
    if unknown:
        raise UsageError(
            f"unknown target(s) {', '.join(unknown)}: choose from {','.join(ALL_TARGETS)}"
        )
    return list(dict.fromkeys(names))


def _ids(batch: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=g)


def _dynamic_spec(seq_len: int) -> Any:
    from torch.export import Dim

    return ({1: Dim("seq_len", min=2, max=max(65536, seq_len))},)


def _first_tensor(out: Any) -> torch.Tensor:
    import torch.utils._pytree as pytree

    for leaf in pytree.tree_leaves(out):
        if isinstance(leaf, torch.Tensor):
            return leaf
    raise TypeError(f"the model's output has no tensor: {type(out).__name__}")


# --- report -----------------------------------------------------------------------------------


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
    latency_ms: float | None = None
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

    row = TargetResult(target)
    if target == "eager":
        row.realization, row.shapes, row.build_seconds = "kernel", "any", 0.0
        return (lambda x: _first_tensor(model(x))), row
    if target == "compile":
        compiled = torch.compile(model, fullgraph=True, backend="inductor")
        if dynamic:
            torch._dynamo.mark_dynamic(ids, 1)
        t0 = time.perf_counter()
        with torch.no_grad():
            compiled(ids)  # compiles
        row.build_seconds = time.perf_counter() - t0
        row.realization, row.shapes = "kernel", "dynamic L" if dynamic else "static"
        return (lambda x: _first_tensor(compiled(x))), row
    if target == "tensorrt" and ids.device.type != "cuda" and torch.cuda.is_available():
        raise TargetUnavailable("TensorRT builds engines for CUDA GPUs; pass --device cuda")
    dynamic = dynamic and target not in STATIC_ONLY
    t0 = time.perf_counter()
    try:
        res = export(
            model, (ids,), target, _dynamic_spec(ids.shape[1]) if dynamic else None, path=path
        )
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


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _fmt_size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def _fmt_left(row: TargetResult) -> str:
    if row.leftover_ops is None:
        return "-"
    return ", ".join(f"{k} x{v}" for k, v in row.leftover_ops.items()) or "none"


def format_report(rows: Sequence[TargetResult]) -> str:
    """The report table (Markdown, aligned) followed by one line per target that did not run."""
    head = [
        "target",
        "status",
        "shapes",
        "realization",
        "leftover non-aten ops",
        "max abs err",
        "median ms",
        "min ms",
        "build s",
        "size",
    ]
    body = []
    for r in rows:
        ran = r.latency_ms is not None
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
                f"{r.latency_ms:.2f}" if ran and r.latency_ms is not None else "-",
                f"{min(r.latency_all_ms):.2f}" if r.latency_all_ms else "-",
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


def _versions() -> dict[str, str | None]:
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


def _machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def cmd_report(args: argparse.Namespace) -> int:
    """``ssmscan report``: build, check and time every target; print the table."""
    targets = _parse_targets(args.targets)
    if args.dynamic and args.seq_len < 2:
        raise UsageError("--seq-len must be >= 2 with --dynamic (or pass --static)")
    t_start = time.perf_counter()
    loaded = _load_on(args.model, args.device)
    lengths = [args.seq_len]
    if args.dynamic:  # a second length checks that the artifact really takes any length
        lengths.append(args.seq_len // 2 + 1 if args.seq_len >= 4 else args.seq_len + 1)
    ids = [
        _ids(args.batch, n, loaded.vocab_size, seed=i).to(args.device)
        for i, n in enumerate(lengths)
    ]
    with torch.no_grad():
        refs = [_first_tensor(loaded.module(x)).detach().clone() for x in ids]
    _progress(
        f"ssmscan report: model {loaded.name}, batch {args.batch}, seq-len {args.seq_len} "
        f"({'dynamic' if args.dynamic else 'static'}), {len(targets)} target(s), "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="ssmscan-report-") as workdir:
        for k, target in enumerate(targets, 1):
            label = f"[{k}/{len(targets)}] {target}"
            t0 = time.perf_counter()
            # stdout is the report's: what the backends print goes to stderr with the progress
            with _ticking(f"{label}: building and running"), contextlib.redirect_stdout(sys.stderr):
                row = run_target(target, loaded, ids, refs, args.dynamic, args.reps, workdir)
            _progress(f"{label}: {row.status} ({time.perf_counter() - t0:.1f} s)")
            row.path = None  # the temporary directory is removed
            rows.append(row)
    total = time.perf_counter() - t_start
    print(
        f"ssmscan report — model {loaded.name}, batch {args.batch}, seq-len {args.seq_len}, "
        f"median of {args.reps} runs, {platform.machine()} {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}"
    )
    print(format_report(rows))
    print(f"\n{len(rows)} target(s) in {total:.0f} s")
    if args.json:
        doc = {
            "model": loaded.name,
            "batch": args.batch,
            "seq_len": args.seq_len,
            "dynamic": args.dynamic,
            "checked_lengths": lengths,
            "reps": args.reps,
            "model_tolerance": MODEL_TOLERANCE_FACTOR * 1e-5,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "total_seconds": total,
            "versions": _versions(),
            "machine": _machine(),
            "targets": [asdict(r) for r in rows],
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        _progress(f"wrote {args.json}")
    return 1 if any(r.status == "FAILED" for r in rows) else 0


# --- export -----------------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    """``ssmscan export``: write one target's artifact and print its report summary."""
    from ssmscan.export import TargetUnavailable, export

    if args.target not in EXPORT_TARGETS:
        raise UsageError(f"unknown target {args.target!r}: choose from {', '.join(EXPORT_TARGETS)}")
    if args.dynamic and args.seq_len < 2:
        raise UsageError("--seq-len must be >= 2 with --dynamic (or pass --static)")
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise UsageError(f"-o {args.output!r}: directory {out_dir!r} does not exist")
    loaded = _load_on(args.model, args.device)
    ids = _ids(args.batch, args.seq_len, loaded.vocab_size, seed=0).to(args.device)
    dynamic = args.dynamic and args.target not in STATIC_ONLY
    if args.dynamic and not dynamic:
        _progress(f"{args.target} needs static shapes: exporting at seq-len {args.seq_len}")
    try:
        with _ticking(f"{args.target}: exporting {loaded.name}"):
            res = export(
                loaded.module,
                (ids,),
                args.target,
                _dynamic_spec(args.seq_len) if dynamic else None,
                path=args.output,
            )
    except TargetUnavailable as e:
        _progress(f"ssmscan export: {args.target} is unavailable here: {e}")
        return 1
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("ssmscan.export."):
            _progress(f"ssmscan export: this ssmscan has no {args.target} target yet")
            return 1
        raise
    print(res.report.summary())
    print(f"wrote {res.path or args.output} ({'dynamic' if dynamic else 'static'} seq-len)")
    return 0


# --- bench ------------------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    """``ssmscan bench``: ssmscan against its anchors; table, JSON and PNG plot."""
    from ssmscan import bench

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU here")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "ssmscan bench plots with matplotlib: pip install 'ssmscan[bench]'"
        ) from None
    os.makedirs(args.out, exist_ok=True)
    _progress(f"ssmscan bench on {args.device}: lengths {args.lengths}")
    result = bench.run(
        args.device,
        args.lengths,
        batch=args.batch,
        dim=args.dim,
        d_state=args.d_state,
        reps=args.reps,
        anchor_reps=args.anchor_reps,
        anchor_max_len=args.anchor_max_len,
        progress=_progress,
    )
    stem = os.path.join(args.out, f"bench_selective_scan_{args.device}")
    bench.plot(result, stem + ".png")
    with open(stem + ".json", "w") as f:
        json.dump(result.to_dict(), f, indent=1)
    meta = result.meta
    print(
        f"selective scan, {args.device} ({meta.get('device_name') or meta.get('cpu_capability')}), "
        f"float32, z/D/delta_bias/softplus, medians; torch {meta['torch']}, {meta['date']}"
    )
    print(bench.format_table(result))
    notes = result.notes + [
        f"{r.impl} at L={r.shape[2]}: correct, not timed ({r.skipped})"
        for r in result.rows
        if r.skipped
    ]
    for note in notes:
        print(f"note: {note}")
    print(f"wrote {stem}.png and {stem}.json")
    return 1 if any(not r.ok for r in result.rows if r.impl == "ssmscan") else 0


# --- parser -----------------------------------------------------------------------------------


def _add_model_args(p: argparse.ArgumentParser, seq_len: int) -> None:
    p.add_argument(
        "--model",
        default="tiny",
        help="tiny (built-in Mamba LM; other presets: small, 130m, ...), hf-tiny (a small random "
        "transformers MambaForCausalLM on ssmscan ops), or path/to/file.py:factory (factory() "
        "returns an nn.Module taking (batch, L) int64 ids) (default: tiny)",
    )
    p.add_argument("--seq-len", type=_positive_int, default=seq_len, help=f"(default: {seq_len})")
    p.add_argument("--batch", type=_positive_int, default=1, help="(default: 1)")
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the model and its inputs live (default: cpu)",
    )
    shapes = p.add_mutually_exclusive_group()
    shapes.add_argument(
        "--dynamic",
        dest="dynamic",
        action="store_true",
        default=True,
        help="export with a dynamic sequence length where the target supports it (tensorrt is "
        "always static) (the default)",
    )
    shapes.add_argument(
        "--static",
        dest="dynamic",
        action="store_false",
        help="export every target at the fixed --seq-len",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``ssmscan`` argument parser (subcommands ``report``, ``export``, ``bench``)."""
    parser = _Parser(
        prog="ssmscan",
        description="Selective scans through the PyTorch 2 stack: where a Mamba model deploys, "
        "how exactly and how fast.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    rep = sub.add_parser(
        "report",
        help="build, check and time a model on every target this machine can run",
        description="For a model (the built-in tiny Mamba LM by default), build each target's "
        "artifact, run it and print: status, shapes, realization of the scans, leftover non-aten "
        "ops, max abs error of the logits against eager, median latency, build time, artifact "
        "size. Targets that cannot run here say why and are not failures. Exit code 1 if a "
        "target that could run failed.",
    )
    _add_model_args(rep, seq_len=256)
    rep.add_argument(
        "--targets",
        default=",".join(ALL_TARGETS),
        help=f"comma-separated subset of {','.join(ALL_TARGETS)} (default: all)",
    )
    rep.add_argument("--reps", type=_positive_int, default=10, help="timed runs (default: 10)")
    rep.add_argument("--json", metavar="OUT.json", help="also write every number to this file")
    rep.set_defaults(func=cmd_report)

    exp = sub.add_parser(
        "export",
        help="write one target's artifact",
        description="Export a model for one target, write the artifact and print the report "
        "summary (realization, nodes, leftover non-aten ops, size, time).",
    )
    _add_model_args(exp, seq_len=64)
    exp.add_argument("--target", required=True, help=f"one of {', '.join(EXPORT_TARGETS)}")
    exp.add_argument("-o", "--output", required=True, metavar="PATH", help="artifact file")
    exp.set_defaults(func=cmd_export)

    ben = sub.add_parser(
        "bench",
        help="selective-scan op benchmark against the anchors, with a plot",
        description="Time ssmscan.selective_scan (impl auto) forward and forward+backward side by "
        "side with the anchors (CPU: the sequential PyTorch loop; CUDA: mamba-ssm's "
        "selective_scan_cuda when importable), after checking each against float64. Prints a "
        "table, writes bench_selective_scan_<device>.png (time against L) and .json to --out.",
    )
    ben.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="(default: cpu)")
    ben.add_argument(
        "--lengths",
        type=_positive_int,
        nargs="+",
        default=[64, 256, 1024],
        help="sequence lengths (default: 64 256 1024)",
    )
    ben.add_argument("--batch", type=_positive_int, default=1, help="(default: 1)")
    ben.add_argument("--dim", type=_positive_int, default=128, help="channels (default: 128)")
    ben.add_argument("--d-state", type=_positive_int, default=16, help="N (default: 16)")
    ben.add_argument("--reps", type=_positive_int, default=10, help="timed calls (default: 10)")
    ben.add_argument(
        "--anchor-reps",
        type=_positive_int,
        default=2,
        help="timed calls of the slow sequential loop (default: 2)",
    )
    ben.add_argument(
        "--anchor-max-len",
        type=_positive_int,
        default=1024,
        help="time the sequential loop only up to this L: its backward is O(L^2) in memory "
        "traffic, about a minute per call at L=2048 (default: 1024)",
    )
    ben.add_argument("--out", default=".", metavar="DIR", help="output folder (default: .)")
    ben.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 a target failed, 2 bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _quiet_known_noise()
    try:
        return int(args.func(args))
    except UsageError as e:
        print(f"ssmscan {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
