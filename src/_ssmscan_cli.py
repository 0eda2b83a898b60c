"""The ``ssmscan`` command's front: arguments, ``--help``, ``--version`` and every check that needs
no model, with the standard library alone.

Importing the ``ssmscan`` package imports torch and registers its ops (seconds on a busy machine),
so this module lies beside the package rather than in it: the console script starts here, answers
``--help``, ``--version`` and bad arguments (one line on stderr, exit code 2) at once, checks that
every output path can be written, and only then imports :mod:`ssmscan.cli` to do the work.

    ssmscan report [--model tiny] [--targets eager,compile,...] [--seq-len 256] [--json out.json]
    ssmscan export --model tiny --target onnx -o model.onnx
    ssmscan bench [--device cpu] [--lengths 64 256 1024] [--out DIR]

Results go to stdout, progress to stderr. Exit codes: 0 success, 1 a target that could run here
failed (``report``, ``export``, ``bench``), 2 bad arguments (a one-line message on stderr, no
traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import NoReturn

ALL_TARGETS = ("eager", "compile", "export", "aoti", "onnx", "tensorrt", "executorch")
EXPORT_TARGETS = ("export", "onnx", "aoti", "tensorrt", "executorch")
# The most tokens (batch x seq-len) one run takes: every target holds the logits and activations
# of the whole sequence at once. The memory a model needs at the length asked for is estimated
# once the model is built; this bound answers at once, before anything is built.
MAX_TOKENS = 1 << 24


class UsageError(Exception):
    """Bad command-line input: reported as one line on stderr, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``prog: error: message (see --help)``), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def version_text() -> str:
    """``ssmscan X (torch Y, python Z)`` from the installed distributions' metadata (no import)."""
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return f"ssmscan {of('ssmscan')} (torch {of('torch')}, python {sys.version.split()[0]})"


# --- checks made before any work ----------------------------------------------------------------


def check_output_file(path: str, flag: str) -> str:
    """Raise :class:`UsageError` unless a file can be written at ``path``; returns ``path``."""
    if not path.strip():
        raise UsageError(f"{flag} is empty: give a file name")
    full = os.path.abspath(path)
    if os.path.isdir(full):
        raise UsageError(f"{flag} {path!r} is a folder: give a file name")
    if os.path.exists(full) and not os.access(full, os.W_OK):
        raise UsageError(f"{flag} {path!r}: the file exists and is not writable")
    _check_folder_writable(os.path.dirname(full), flag, path)
    return path


def _check_folder_writable(folder: str, flag: str, path: str) -> None:
    if not os.path.exists(folder):
        raise UsageError(f"{flag} {path!r}: folder {folder!r} does not exist")
    if not os.path.isdir(folder):
        raise UsageError(f"{flag} {path!r}: {folder!r} is not a folder")
    try:  # permissions, read-only file systems, pseudo file systems: try it
        with tempfile.TemporaryFile(dir=folder, prefix=".ssmscan-write-check-"):
            pass
    except OSError as e:
        raise UsageError(
            f"{flag} {path!r}: cannot write in folder {folder!r} ({e.strerror or e})"
        ) from None


def prepare_output_folder(out: str | None) -> str:
    """The folder ``ssmscan bench`` writes to, created now: ``out``, or a fresh
    ``ssmscan-bench-<date>-<time>`` in the current folder when ``out`` is None."""
    if out is None:
        stem = f"ssmscan-bench-{time.strftime('%Y%m%d-%H%M%S')}"
        out, k = stem, 1
        while os.path.exists(out):
            k += 1
            out = f"{stem}-{k}"
    elif not out.strip():
        raise UsageError("--out is empty: give a folder")
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"--out {out!r} is a file, not a folder")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out!r}: cannot create the folder ({e.strerror or e})") from None
    _check_folder_writable(os.path.abspath(out), "--out", out)
    return out


def check_tokens(batch: int, seq_len: int) -> None:
    """Raise :class:`UsageError` when ``batch * seq_len`` is above :data:`MAX_TOKENS`."""
    if batch * seq_len > MAX_TOKENS:
        raise UsageError(
            f"--seq-len {seq_len} with --batch {batch} is {batch * seq_len:,} tokens, more than "
            f"one run takes ({MAX_TOKENS:,}: every target holds the whole sequence's logits and "
            "activations in memory); choose a smaller --seq-len"
        )


def parse_targets(text: str) -> list[str]:
    """``--targets``: comma-separated names from :data:`ALL_TARGETS`, duplicates dropped."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UsageError("--targets is empty")
    unknown = [t for t in names if t not in ALL_TARGETS]
    if unknown:
        raise UsageError(
            f"unknown target(s) {', '.join(unknown)}: choose from {','.join(ALL_TARGETS)}"
        )
    return list(dict.fromkeys(names))


def check_model_spec(spec: str) -> None:
    """The form of ``--model``: a ``path/to/file.py:factory`` must name an existing file and an
    identifier (names without ``:`` are checked against the presets once ssmscan is imported)."""
    if ":" not in spec:
        return
    path, _, factory_name = spec.rpartition(":")
    if not path.endswith(".py") or not factory_name.isidentifier():
        raise UsageError(
            f"--model {spec!r}: expected a preset (tiny, tiny-mamba2, ...), hf-<family>-tiny or "
            "path/to/file.py:factory"
        )
    if not os.path.isfile(path):
        raise UsageError(f"--model {spec!r}: no such file {path!r}")


def check_args(args: argparse.Namespace) -> None:
    """Every check that needs no model, in place on ``args`` (``report``'s targets become a list,
    ``bench``'s output folder is created); raises :class:`UsageError`."""
    if args.command in ("report", "export"):
        check_model_spec(args.model)
        if args.dynamic and args.seq_len < 2:
            raise UsageError("--seq-len must be >= 2 with --dynamic (or pass --static)")
        check_tokens(args.batch, args.seq_len)
    if args.command == "report":
        args.targets = parse_targets(args.targets)
        if args.json is not None:
            check_output_file(args.json, "--json")
    elif args.command == "export":
        if args.target not in EXPORT_TARGETS:
            raise UsageError(
                f"unknown target {args.target!r}: choose from {', '.join(EXPORT_TARGETS)}"
            )
        if args.onnx_linear_attention and args.target != "onnx":
            raise UsageError(
                f"--onnx-linear-attention needs --target onnx; got --target {args.target}"
            )
        check_output_file(args.output, "-o")
    elif args.command == "bench":
        if importlib.util.find_spec("matplotlib") is None:
            raise UsageError("ssmscan bench plots with matplotlib: pip install 'ssmscan[bench]'")
        check_tokens(args.batch, max(args.lengths))
        args.out = prepare_output_folder(args.out)


# --- parser -------------------------------------------------------------------------------------


def _add_model_args(p: argparse.ArgumentParser, seq_len: int) -> None:
    p.add_argument(
        "--model",
        default="tiny",
        help="tiny (built-in Mamba LM; other presets: small, 130m, ...), tiny-mamba2 (built-in "
        "Mamba-2 LM; other presets: 130m-mamba2, ...), hf-tiny or hf-<family>-tiny (a small "
        "random transformers model on ssmscan ops; families: mamba, falcon_mamba, jamba, zamba, "
        "mamba2, bamba, granitemoehybrid, nemotron_h, falcon_h1, zamba2), or "
        "path/to/file.py:factory (factory() returns an nn.Module taking (batch, L) int64 ids) "
        "(default: tiny)",
    )
    p.add_argument(
        "--seq-len",
        type=positive_int,
        default=seq_len,
        help=f"(default: {seq_len}; at most {MAX_TOKENS:,} tokens with --batch, and what the "
        "machine's memory holds)",
    )
    p.add_argument("--batch", type=positive_int, default=1, help="(default: 1)")
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
    parser = Parser(
        prog="ssmscan",
        description="Selective scans through the PyTorch 2 stack: where a Mamba model deploys, "
        "how exactly and how fast. Output paths are checked before any work starts.",
    )
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    rep = sub.add_parser(
        "report",
        help="build, check and time a model on every target this machine can run",
        description="For a model (the built-in tiny Mamba LM by default), build each target's "
        "artifact, run it and print: status, shapes, realization of the scans, leftover non-aten "
        "ops (or what the target turned them into), max abs error of the logits against eager, "
        "latency (min, median, p90 of --reps runs; a warning under the table when they spread "
        "widely, as on a busy machine), build time, artifact size. Targets that cannot run here "
        "say why and are not failures. Exit code 1 if a target that could run failed.",
    )
    _add_model_args(rep, seq_len=256)
    rep.add_argument(
        "--targets",
        default=",".join(ALL_TARGETS),
        help=f"comma-separated subset of {','.join(ALL_TARGETS)} (default: all)",
    )
    rep.add_argument("--reps", type=positive_int, default=10, help="timed runs (default: 10)")
    rep.add_argument("--json", metavar="OUT.json", help="also write every number to this file")
    rep.set_defaults(func="report")

    exp = sub.add_parser(
        "export",
        help="write one target's artifact",
        description="Export a model for one target, write the artifact and print the report "
        "summary (realization, nodes, leftover non-aten ops, size, time).",
    )
    _add_model_args(exp, seq_len=64)
    exp.add_argument("--target", required=True, help=f"one of {', '.join(EXPORT_TARGETS)}")
    exp.add_argument("-o", "--output", required=True, metavar="PATH", help="artifact file")
    exp.add_argument(
        "--onnx-linear-attention",
        action="store_true",
        help="target onnx: write each Mamba-2 SSD scan as one opset-27 LinearAttention node "
        "(ONNX Runtime >= 1.32) instead of a Scan loop",
    )
    exp.set_defaults(func="export")

    ben = sub.add_parser(
        "bench",
        help="selective-scan op benchmark against the anchors, with a plot",
        description="Time ssmscan.selective_scan (impl auto) forward and forward+backward side by "
        "side with the anchors (CPU: the sequential PyTorch loop; CUDA: mamba-ssm's "
        "selective_scan_cuda when importable), after checking each against float64. Prints a "
        "table, writes bench_selective_scan_<device>.png (time against L) and .json to --out "
        "(by default a fresh folder ssmscan-bench-<date>-<time> in the current folder, printed), "
        "and each step's progress to stderr.",
    )
    ben.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="(default: cpu)")
    ben.add_argument(
        "--lengths",
        type=positive_int,
        nargs="+",
        default=[64, 256, 1024],
        help="sequence lengths (default: 64 256 1024)",
    )
    ben.add_argument("--batch", type=positive_int, default=1, help="(default: 1)")
    ben.add_argument("--dim", type=positive_int, default=128, help="channels (default: 128)")
    ben.add_argument("--d-state", type=positive_int, default=16, help="N (default: 16)")
    ben.add_argument("--reps", type=positive_int, default=10, help="timed calls (default: 10)")
    ben.add_argument(
        "--anchor-reps",
        type=positive_int,
        default=2,
        help="timed calls of the slow sequential loop (default: 2)",
    )
    ben.add_argument(
        "--anchor-max-len",
        type=positive_int,
        default=1024,
        help="time the sequential loop only up to this L: its backward is O(L^2) in memory "
        "traffic, about a minute per call at L=2048 (default: 1024)",
    )
    ben.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output folder, created if missing (default: a fresh ssmscan-bench-<date>-<time> "
        "folder in the current folder)",
    )
    ben.set_defaults(func="bench")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 a target failed, 2 bad arguments).

    ``--help``, ``--version`` and bad arguments answer here without importing torch.
    """
    args = build_parser().parse_args(argv)
    try:
        check_args(args)
    except UsageError as e:
        print(f"ssmscan {args.command}: error: {e}", file=sys.stderr)
        return 2
    try:
        from ssmscan.cli import run_command  # imports torch
    except KeyboardInterrupt:
        return 130
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
