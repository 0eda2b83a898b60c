"""The ``ssmscan`` command line's work: ``report``, ``export`` and ``bench``, thin over the library.

The arguments, ``--help``, ``--version`` and the checks that need no model (output paths, sizes)
are in the torch-free front, :mod:`_ssmscan_cli`, where the console script starts; it calls
:func:`run_command` here once they pass.

    ssmscan report [--model tiny] [--targets eager,compile,...] [--seq-len 256] [--json out.json]
    ssmscan export --model tiny --target onnx -o model.onnx
    ssmscan bench [--device cpu] [--lengths 128 512 2048] [--out DIR]

Results go to stdout, progress to stderr. Exit codes: 0 success, 1 a target that could run here
failed, 2 bad arguments (a one-line message on stderr, no traceback), 130 interrupted.
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
from dataclasses import asdict

import torch

from _ssmscan_cli import build_parser, main
from ssmscan._cli_models import (
    check_memory,
    dynamic_spec,
    example_ids,
    load_on,
    reference_outputs,
)
from ssmscan._cli_report import format_report, machine_info, run_target, spread_warning, versions
from ssmscan._cli_util import (
    MODEL_TOLERANCE_FACTOR,
    STATIC_ONLY,
    Heartbeat,
    UsageError,
    progress,
    quiet_known_noise,
    ticking,
)

__all__ = ["build_parser", "cmd_bench", "cmd_export", "cmd_report", "main", "run_command"]


def cmd_report(args: argparse.Namespace) -> int:
    """``ssmscan report``: build, check and time every target; print the table."""
    targets = args.targets  # a list, checked by the front
    t_start = time.perf_counter()
    loaded = load_on(args.model, args.device)
    lengths = [args.seq_len]
    if args.dynamic:  # a second length checks that the artifact really takes any length
        lengths.append(args.seq_len // 2 + 1 if args.seq_len >= 4 else args.seq_len + 1)
    check_memory(loaded, args.batch, max(lengths), args.device)
    ids = [
        example_ids(args.batch, n, loaded.vocab_size, seed=i).to(args.device)
        for i, n in enumerate(lengths)
    ]
    refs = reference_outputs(loaded, ids)
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
        f"{args.reps} timed runs each, {platform.machine()} {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}"
    )
    print(format_report(rows))
    warning = spread_warning(rows)
    if warning:
        print(f"\n{warning}")
    print(f"\n{len(rows)} target(s) in {total:.0f} s")
    if args.json is not None:
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

    loaded = load_on(args.model, args.device)
    check_memory(loaded, args.batch, args.seq_len, args.device)
    ids = example_ids(args.batch, args.seq_len, loaded.vocab_size, seed=0).to(args.device)
    reference_outputs(loaded, [ids])  # a model that cannot run eagerly is a usage error
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
                onnx_linear_attention=args.onnx_linear_attention,
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
    signature = getattr(res, "signature", None)  # named inputs / outputs, where the target has them
    if signature is not None:
        print(signature.describe())
    print(f"wrote {res.path or args.output} ({'dynamic' if dynamic else 'static'} seq-len)")
    return 0


# --- bench ------------------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    """``ssmscan bench``: ssmscan against its anchors; table, JSON and PNG plot in ``args.out``
    (created by the front)."""
    from ssmscan import bench

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU here")
    progress(f"ssmscan bench on {args.device}: lengths {args.lengths}; writing to {args.out}/")
    with Heartbeat() as beat:
        result = bench.run(
            args.device,
            args.lengths,
            batch=args.batch,
            dim=args.dim,
            d_state=args.d_state,
            reps=args.reps,
            anchor_reps=args.anchor_reps,
            anchor_max_len=args.anchor_max_len,
            progress=beat,
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


COMMANDS = {"report": cmd_report, "export": cmd_export, "bench": cmd_bench}


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed and checked command (:func:`_ssmscan_cli.main` calls this); returns the
    exit code. A :class:`UsageError` found once the model is built (a model that cannot run, a
    length that does not fit in memory) is one line on stderr and exit code 2."""
    quiet_known_noise()
    try:
        return int(COMMANDS[args.func](args))
    except UsageError as e:
        print(f"ssmscan {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
