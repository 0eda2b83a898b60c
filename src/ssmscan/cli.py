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
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict

import torch

from ssmscan._cli_models import dynamic_spec, example_ids, first_tensor, load_on, parse_targets
from ssmscan._cli_report import format_report, machine_info, run_target, versions
from ssmscan._cli_util import (
    ALL_TARGETS,
    EXPORT_TARGETS,
    MODEL_TOLERANCE_FACTOR,
    STATIC_ONLY,
    Parser,
    UsageError,
    positive_int,
    progress,
    quiet_known_noise,
    ticking,
)


def cmd_report(args: argparse.Namespace) -> int:
    """``ssmscan report``: build, check and time every target; print the table."""
    targets = parse_targets(args.targets)
    if args.dynamic and args.seq_len < 2:
        raise UsageError("--seq-len must be >= 2 with --dynamic (or pass --static)")
    t_start = time.perf_counter()
    loaded = load_on(args.model, args.device)
    lengths = [args.seq_len]
    if args.dynamic:  # a second length checks that the artifact really takes any length
        lengths.append(args.seq_len // 2 + 1 if args.seq_len >= 4 else args.seq_len + 1)
    ids = [
        example_ids(args.batch, n, loaded.vocab_size, seed=i).to(args.device)
        for i, n in enumerate(lengths)
    ]
    with torch.no_grad():
        refs = [first_tensor(loaded.module(x)).detach().clone() for x in ids]
    progress(
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
            with ticking(f"{label}: building and running"), contextlib.redirect_stdout(sys.stderr):
                row = run_target(target, loaded, ids, refs, args.dynamic, args.reps, workdir)
            progress(f"{label}: {row.status} ({time.perf_counter() - t0:.1f} s)")
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
            "versions": versions(),
            "machine": machine_info(),
            "targets": [asdict(r) for r in rows],
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        progress(f"wrote {args.json}")
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
    loaded = load_on(args.model, args.device)
    ids = example_ids(args.batch, args.seq_len, loaded.vocab_size, seed=0).to(args.device)
    dynamic = args.dynamic and args.target not in STATIC_ONLY
    if args.dynamic and not dynamic:
        progress(f"{args.target} needs static shapes: exporting at seq-len {args.seq_len}")
    try:
        with ticking(f"{args.target}: exporting {loaded.name}"):
            res = export(
                loaded.module,
                (ids,),
                args.target,
                dynamic_spec(args.seq_len) if dynamic else None,
                path=args.output,
            )
    except TargetUnavailable as e:
        progress(f"ssmscan export: {args.target} is unavailable here: {e}")
        return 1
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("ssmscan.export."):
            progress(f"ssmscan export: this ssmscan has no {args.target} target yet")
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
    progress(f"ssmscan bench on {args.device}: lengths {args.lengths}")
    result = bench.run(
        args.device,
        args.lengths,
        batch=args.batch,
        dim=args.dim,
        d_state=args.d_state,
        reps=args.reps,
        anchor_reps=args.anchor_reps,
        anchor_max_len=args.anchor_max_len,
        progress=progress,
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
    p.add_argument("--seq-len", type=positive_int, default=seq_len, help=f"(default: {seq_len})")
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
        "how exactly and how fast.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

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
    rep.add_argument("--reps", type=positive_int, default=10, help="timed runs (default: 10)")
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
    ben.add_argument("--out", default=".", metavar="DIR", help="output folder (default: .)")
    ben.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 a target failed, 2 bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    quiet_known_noise()
    try:
        return int(args.func(args))
    except UsageError as e:
        print(f"ssmscan {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
