"""The ``ssmscan`` command line, run as its console script runs it, in subprocesses: the report's
numbers are measurements made in that run, models from a user's file, the export artifact loads,
the benchmark writes its plot and table; every ``--help``, ``--version`` and bad argument answers
without importing torch, and bad arguments (output paths, sizes, models that cannot run) exit 2
with one line before any work."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime"))
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
MODEL_TOL = 1e-4  # ssmscan.cli: 10x the op's float32 tolerance, relative to max|logits|


def _entry_point() -> tuple[str, str]:
    """``module, function`` of the ``ssmscan`` console script as pyproject.toml declares it."""
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    match = re.search(r'^ssmscan\s*=\s*"([\w.]+):(\w+)"', text, re.MULTILINE)
    assert match, "pyproject.toml declares no ssmscan console script"
    return match.group(1), match.group(2)


MODULE, FUNCTION = _entry_point()
# What the console script pip writes does: import the entry point and exit with its result.
SCRIPT = f"import sys; from {MODULE} import {FUNCTION}; sys.exit({FUNCTION}())"
# ... with torch made unimportable: --help, --version and bad arguments must not need it.
NO_TORCH = (
    "import sys\n"
    "class NoTorch:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'torch' or name.startswith('torch.'):\n"
    "            raise ImportError('torch was imported')\n"
    "sys.meta_path.insert(0, NoTorch())\n" + SCRIPT.replace("; ", "\n")
)


def ssmscan(
    *args: str, cwd: Path | None = None, timeout: float = 300, torch_free: bool = False
) -> subprocess.CompletedProcess:
    """Run the ``ssmscan`` command (``torch_free``: where importing torch is an error)."""
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH if torch_free else SCRIPT, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def _rows(doc: dict) -> dict[str, dict]:
    return {r["target"]: r for r in doc["targets"]}


def _assert_measured(row: dict, lengths: list[int]) -> None:
    assert row["status"] == "ok", row
    assert row["latency_ms"] > 0 and len(row["latency_all_ms"]) >= 1
    assert all(t > 0 for t in row["latency_all_ms"])
    assert row["max_abs_error"] is not None and row["rel_error"] <= MODEL_TOL
    assert row["checked_lengths"] == lengths


def test_report_tiny_subset(tmp_path):
    out = tmp_path / "report.json"
    t0 = time.perf_counter()
    res = ssmscan(
        "report",
        "--targets",
        "eager,export,onnx,aoti",
        "--seq-len",
        "64",
        "--reps",
        "3",
        "--json",
        str(out),
    )
    elapsed = time.perf_counter() - t0
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(out.read_text())
    rows = _rows(doc)
    assert list(rows) == ["eager", "export", "onnx", "aoti"]
    assert doc["seq_len"] == 64 and doc["dynamic"] and doc["checked_lengths"] == [64, 33]
    assert doc["versions"]["torch"] == torch.__version__ and doc["machine"]["cpu_count"] >= 1
    assert 0 < doc["total_seconds"] <= elapsed
    # every number was measured in this run: nonzero, varying latencies; errors computed
    _assert_measured(rows["eager"], [64, 33])
    assert rows["eager"]["max_abs_error"] == 0
    _assert_measured(rows["export"], [64, 33])
    assert rows["export"]["leftover_ops"] == {"ssmscan.selective_scan_fwd.default": 2}
    assert rows["export"]["realization"] == "kernel" and rows["export"]["artifact_bytes"] > 0
    _assert_measured(rows["aoti"], [64, 33])
    assert rows["aoti"]["realization"] == "loop" and rows["aoti"]["artifact_bytes"] > 0
    assert "ssmscan.selective_scan_fwd.default" not in rows["aoti"]["leftover_ops"]
    assert rows["aoti"]["stage_seconds"]["aoti compile"] > 0
    if HAS_ONNX:
        _assert_measured(rows["onnx"], [64, 33])
        assert rows["onnx"]["realization"] == "loop" and rows["onnx"]["artifact_bytes"] > 0
    else:
        assert rows["onnx"]["status"] == "unavailable" and "onnx" in rows["onnx"]["reason"]
    # the printed table and the progress lines
    table = [line for line in res.stdout.splitlines() if line.startswith("| ")]
    assert table[0].split("|")[1].strip() == "target" and len(table) == 5
    assert any(line.startswith("| aoti") and "scan x2 -> C++ loop" in line for line in table)
    if HAS_ONNX:
        assert any(line.startswith("| onnx") and "scan x2 -> ONNX Scan" in line for line in table)
    assert "higher_order.scan" not in res.stdout  # a target's own loop is not a leftover
    for row in rows.values():  # min <= median <= p90, each measured
        assert row["latency_min_ms"] <= row["latency_ms"] <= row["latency_p90_ms"], row
    assert "[4/4] aoti" in res.stderr


def _write_model(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "my_model.py"
    path.write_text(textwrap.dedent(body))
    return path


USER_MODEL = """
    import torch
    import ssmscan

    class ScanLM(torch.nn.Module):
        # an embedding, a linear_scan over time and a head: (batch, L) ids -> (batch, L, 40)
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(40, 16)
            self.gate = torch.nn.Linear(16, 16)
            self.head = torch.nn.Linear(16, 40)

        def forward(self, ids):
            x = self.emb(ids).transpose(1, 2)  # (batch, 16, L)
            a = torch.sigmoid(self.gate(self.emb(ids))).transpose(1, 2)
            h = ssmscan.linear_scan(a.contiguous(), x.contiguous(), dim=-1)
            return self.head(h.transpose(1, 2))

    def make():
        torch.manual_seed(0)
        return ScanLM()

    def not_a_module():
        return 3
"""


def test_report_model_from_file_static(tmp_path):
    path = _write_model(tmp_path, USER_MODEL)
    out = tmp_path / "r.json"
    res = ssmscan(
        "report",
        "--model",
        f"{path}:make",
        "--targets",
        "eager,export",
        "--seq-len",
        "20",
        "--batch",
        "2",
        "--static",
        "--reps",
        "2",
        "--json",
        str(out),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    rows = _rows(json.loads(out.read_text()))
    _assert_measured(rows["eager"], [20])
    _assert_measured(rows["export"], [20])
    assert rows["export"]["shapes"] == "static"
    assert rows["export"]["leftover_ops"] == {"ssmscan.linear_scan_fwd.default": 1}


def test_report_exit_1_when_an_available_target_fails(tmp_path):
    path = _write_model(
        tmp_path,
        """
        import torch

        class Branchy(torch.nn.Module):
            # data-dependent control flow: eager runs it, torch.export cannot
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(10, 4)

            def forward(self, ids):
                x = self.emb(ids)
                if x.sum() > 0:
                    return x * 2
                return x

        def make():
            return Branchy()
        """,
    )
    res = ssmscan("report", "--model", f"{path}:make", "--targets", "eager,export", "--reps", "1")
    assert res.returncode == 1, res.stdout + res.stderr[-3000:]
    assert "export: FAILED:" in res.stdout and "[2/2] export: FAILED" in res.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="TensorRT may be available with a GPU")
def test_report_unavailable_target_is_not_a_failure(tmp_path):
    out = tmp_path / "r.json"
    res = ssmscan(
        "report",
        "--targets",
        "eager,tensorrt",
        "--seq-len",
        "16",
        "--reps",
        "1",
        "--json",
        str(out),
    )
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    row = _rows(json.loads(out.read_text()))["tensorrt"]
    assert row["status"] == "unavailable" and "tensorrt" in row["reason"].lower()
    assert "tensorrt: unavailable:" in res.stdout
    assert res.stdout.startswith("ssmscan report")  # torch_tensorrt's own prints go to stderr


def test_export_writes_loadable_program(tmp_path):
    out = tmp_path / "tiny.pt2"
    res = ssmscan(
        "export", "--model", "tiny", "--target", "export", "-o", str(out), "--seq-len", "16"
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "export: realization kernel" in res.stdout and "leftover non-aten ops" in res.stdout
    import torch.utils._pytree as pytree

    import ssmscan as _  # noqa: F401  (registers the ops the program calls)
    from ssmscan.models import build_model

    ep = torch.export.load(str(out))
    ids = torch.randint(0, 256, (1, 23))  # another length: the program is dynamic
    got = pytree.tree_leaves(ep.module()(ids))[0]  # the logits, the first output
    with torch.no_grad():
        expected = build_model("tiny").eval()(ids)[0]
    torch.testing.assert_close(got, expected)


@pytest.mark.onnx
@pytest.mark.skipif(not HAS_ONNX, reason="needs the onnx extra (onnx, onnxscript, onnxruntime)")
def test_export_onnx_runs_in_onnxruntime(tmp_path):
    import onnxruntime as ort

    out = tmp_path / "tiny.onnx"
    res = ssmscan("export", "--target", "onnx", "-o", str(out), "--seq-len", "16")
    assert res.returncode == 0, res.stderr[-3000:]
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    ids = torch.randint(0, 256, (1, 9))
    logits = sess.run(None, {sess.get_inputs()[0].name: ids.numpy()})[0]
    assert logits.shape == (1, 9, 256)


@pytest.mark.onnx
@pytest.mark.skipif(not HAS_ONNX, reason="needs the onnx extra (onnx, onnxscript, onnxruntime)")
def test_export_mamba2_onnx_linear_attention(tmp_path):
    import onnx
    import onnxruntime as ort

    out = tmp_path / "mamba2.onnx"
    res = ssmscan(
        "export", "--model", "tiny-mamba2", "--target", "onnx", "--onnx-linear-attention",
        "-o", str(out), "--seq-len", "16",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert ops.count("LinearAttention") == 2 and "Scan" not in ops  # the tiny preset: 2 layers
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    ids = torch.randint(0, 256, (1, 9))
    logits = sess.run(None, {sess.get_inputs()[0].name: ids.numpy()})[0]
    from ssmscan.models import Mamba2Config, Mamba2LM

    with torch.no_grad():
        want = Mamba2LM.from_config(Mamba2Config.preset("tiny")).eval()(ids)[0]
    err = (torch.from_numpy(logits) - want).abs().max() / want.abs().max()
    assert err <= MODEL_TOL, err


@pytest.mark.skipif(not HAS_MPL, reason="ssmscan bench plots with matplotlib (bench extra)")
def test_bench_cpu_writes_plot_and_table(tmp_path):
    res = ssmscan(
        "bench",
        "--device",
        "cpu",
        "--lengths",
        "8",
        "33",
        "--dim",
        "8",
        "--reps",
        "2",
        "--anchor-reps",
        "1",
        "--out",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    png = tmp_path / "bench_selective_scan_cpu.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    doc = json.loads((tmp_path / "bench_selective_scan_cpu.json").read_text())
    assert {(r["impl"], r["shape"][2]) for r in doc["rows"]} == {
        ("ssmscan", 8),
        ("loop", 8),
        ("ssmscan", 33),
        ("loop", 33),
    }
    assert all(r["ok"] and r["fwd_ms"] > 0 and r["fwd_bwd_ms"] > 0 for r in doc["rows"])
    lines = [line for line in res.stdout.splitlines() if line.startswith("| ")]
    assert "ssmscan fwd ms" in lines[0] and "loop fwd ms" in lines[0]
    assert [line.split("|")[1].strip() for line in lines[1:]] == ["1,8,8,16", "1,8,33,16"]


@pytest.mark.parametrize(
    "command", [[], ["report"], ["export"], ["bench"]], ids=lambda c: "-".join(c) or "top"
)
def test_help_without_torch(command):
    res = ssmscan(*command, "--help", torch_free=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: ssmscan") and res.stderr == ""


def test_version_without_torch():
    import ssmscan as package

    res = ssmscan("--version", torch_free=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[:2] == ["ssmscan", package.__version__], res.stdout
    assert f"torch {torch.__version__}" in res.stdout


def test_python_m_ssmscan_runs_the_same_command():
    res = subprocess.run(
        [sys.executable, "-m", "ssmscan", "--version"], capture_output=True, text=True
    )
    assert res.returncode == 0 and res.stdout.startswith("ssmscan "), res.stderr


BAD = {
    "unknown-target": ["report", "--targets", "eager,tpu"],
    "missing-file": ["report", "--model", "nowhere/model.py:make"],
    "not-a-factory-spec": ["report", "--model", "model.txt:make"],
    "negative-seq-len": ["report", "--seq-len", "-3"],
    "zero-reps": ["report", "--reps", "0"],
    "export-unknown-target": ["export", "--target", "tflite", "-o", "x.bin"],
    "export-no-output": ["export", "--target", "onnx"],
    "linear-attention-not-onnx": "export --target aoti --onnx-linear-attention -o x.pt2".split(),
    "bench-bad-length": ["bench", "--lengths", "0"],
    "no-command": [],
}


@pytest.mark.parametrize("args", list(BAD.values()), ids=list(BAD))
def test_bad_arguments_exit_2_with_one_line_without_torch(args, tmp_path):
    res = ssmscan(*args, cwd=tmp_path, torch_free=True)
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "error:" in res.stderr and "Traceback" not in res.stderr
    assert res.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_unknown_model_exit_2(tmp_path):
    res = ssmscan("report", "--model", "huge", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "'huge'" in res.stderr


@pytest.mark.parametrize("factory", ["absent", "not_a_module"])
def test_bad_factory_exit_2(factory, tmp_path):
    path = _write_model(tmp_path, USER_MODEL)
    res = ssmscan("report", "--model", f"{path}:{factory}", "--targets", "eager")
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and factory in res.stderr


@pytest.mark.slow
def test_report_default_all_targets_under_3_minutes(tmp_path):
    out = tmp_path / "report.json"
    t0 = time.perf_counter()
    res = ssmscan("report", "--json", str(out), timeout=600)
    elapsed = time.perf_counter() - t0
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    rows = _rows(json.loads(out.read_text()))
    assert list(rows) == ["eager", "compile", "export", "aoti", "onnx", "tensorrt", "executorch"]
    for name in ("eager", "compile", "export", "aoti"):
        _assert_measured(rows[name], [256, 129])
    for row in rows.values():
        assert row["status"] in ("ok", "unavailable"), row
        assert row["status"] == "ok" or row["reason"]
    assert elapsed < 180, f"ssmscan report took {elapsed:.0f} s"


# --- errors found before any work ---------------------------------------------------------------

RECORDING_MODEL = """
    import pathlib
    import torch

    HERE = pathlib.Path(__file__).parent

    class Recorded(torch.nn.Module):
        # leaves a file behind when built and when run, so a test sees whether work started
        def __init__(self, vocab, out):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, 1)
            self.out = out

        def forward(self, ids):
            (HERE / "ran").touch()
            if self.out == "raise":
                raise RuntimeError("the layer norm got a bad shape")
            if self.out == "none":
                return None
            return self.emb(ids)

    def make():
        (HERE / "built").touch()
        return Recorded(16, "tensor")

    def make_raising():
        return Recorded(16, "raise")

    def make_none():
        return Recorded(16, "none")

    def make_wide():  # a million-token vocabulary: logits of 4 MB per token
        (HERE / "built").touch()
        return Recorded(1_000_000, "tensor")
"""


def _checked_up_front(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert res.returncode == 2, res.stdout + res.stderr[-3000:]
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and res.stdout == ""
    for needle in needles:
        assert needle in res.stderr, res.stderr


UNWRITABLE = "/proc/ssmscan-out"  # no file can be created in /proc, not even by root
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="uses /proc as an unwritable place")

# name -> (arguments after the model, what the message names); {d} is the test's folder
UP_FRONT = {
    "report-json-folder": (["report", "--json", "{d}"], ["--json", "is a folder"]),
    "report-json-missing-folder": (
        ["report", "--json", "{d}/nowhere/r.json"],
        ["--json", "does not exist"],
    ),
    "report-json-empty": (["report", "--json", ""], ["--json is empty"]),
    "report-json-unwritable": (["report", "--json", UNWRITABLE + ".json"], ["--json", "/proc"]),
    "report-huge-seq-len": (["report", "--seq-len", "1000000000"], ["--seq-len 1000000000"]),
    "export-o-folder": (["export", "--target", "export", "-o", "{d}"], ["-o", "is a folder"]),
    "export-o-unwritable": (
        ["export", "--target", "export", "-o", UNWRITABLE + ".pt2"],
        ["-o", "/proc"],
    ),
    "export-huge-seq-len": (
        ["export", "--target", "export", "-o", "{d}/m.pt2", "--seq-len", "1000000000"],
        ["--seq-len 1000000000"],
    ),
}


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=linux_only) if "unwritable" in c else c for c in UP_FRONT],
)
def test_output_paths_and_sizes_are_checked_before_the_model_is_built(case, tmp_path):
    args, needles = UP_FRONT[case]
    path = _write_model(tmp_path, RECORDING_MODEL)
    command, *rest = [a.format(d=tmp_path) for a in args]
    res = ssmscan(
        command,
        "--model",
        f"{path}:make",
        *(["--targets", "eager", "--reps", "1"] if command == "report" else []),
        *rest,
        torch_free=True,
    )
    _checked_up_front(res, *needles)
    assert not (tmp_path / "built").exists()


@pytest.mark.parametrize(
    "out", ["file", pytest.param(UNWRITABLE, marks=linux_only)], ids=["file", "unwritable"]
)
def test_bench_out_is_checked_before_any_work(out, tmp_path):
    if out == "file":
        out = str(tmp_path / "taken")
        Path(out).write_text("")
    res = ssmscan("bench", "--lengths", "8", "--dim", "8", "--out", out, torch_free=True)
    if not HAS_MPL:  # the missing extra is reported first, as cleanly
        _checked_up_front(res, "matplotlib")
    else:
        _checked_up_front(res, "--out", out)


@pytest.mark.parametrize("command", ["report", "export"])
def test_memory_estimate_refuses_a_length_that_cannot_fit(command, tmp_path):
    path = _write_model(tmp_path, RECORDING_MODEL)
    extra = ["--targets", "eager"] if command == "report" else ["--target", "export", "-o", "m.pt2"]
    # 100k tokens of a million-word vocabulary: 400 GB of logits
    res = ssmscan(
        command, "--model", f"{path}:make_wide", "--seq-len", "100000", *extra, cwd=tmp_path
    )
    _checked_up_front(res, "--seq-len 100000", "GiB")
    assert (tmp_path / "built").exists() and not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    ("factory", "needle"),
    [("make_raising", "RuntimeError: the layer norm got a bad shape"), ("make_none", "no tensor")],
    ids=["forward-raises", "forward-returns-none"],
)
@pytest.mark.parametrize("command", ["report", "export"])
def test_model_that_cannot_run_exit_2(command, factory, needle, tmp_path):
    path = _write_model(tmp_path, RECORDING_MODEL)
    extra = ["--targets", "eager,export"] if command == "report" else ["--target", "export"]
    if command == "export":
        extra += ["-o", str(tmp_path / "m.pt2")]
    res = ssmscan(command, "--model", f"{path}:{factory}", "--seq-len", "8", *extra)
    _checked_up_front(res, f"{path}:{factory}", needle, "(1, 8) int64 ids")
    assert not (tmp_path / "m.pt2").exists()


@pytest.mark.skipif(not HAS_MPL, reason="ssmscan bench plots with matplotlib (bench extra)")
def test_bench_writes_a_fresh_folder_and_shows_progress(tmp_path):
    res = ssmscan(
        "bench",
        "--lengths",
        "8",
        "--dim",
        "4",
        "--d-state",
        "2",
        "--reps",
        "1",
        "--anchor-reps",
        "1",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (folder,) = tmp_path.iterdir()  # nothing else in the current folder
    assert folder.is_dir() and folder.name.startswith("ssmscan-bench-")
    assert sorted(p.name for p in folder.iterdir()) == [
        "bench_selective_scan_cpu.json",
        "bench_selective_scan_cpu.png",
    ]
    assert folder.name in res.stderr and folder.name in res.stdout
    # each step announced as it starts and as it ends
    assert "[1/2] L=8 ssmscan: checking" in res.stderr
    assert "[2/2] L=8 loop: fwd" in res.stderr


# --- the report's table -------------------------------------------------------------------------


def _row(target: str, times: list[float], leftover: dict[str, int] | None = None):
    import statistics

    from ssmscan._cli_report import TargetResult, p90

    return TargetResult(
        target,
        realization="loop",
        leftover_ops=leftover,
        max_abs_error=1e-7,
        latency_ms=statistics.median(times),
        latency_min_ms=min(times),
        latency_p90_ms=p90(times),
        latency_all_ms=times,
    )


def test_report_table_shows_the_spread_and_warns_when_wide():
    from ssmscan._cli_report import format_report, spread_warning

    steady = _row("onnx", [1.0, 1.1, 1.05, 1.2])
    noisy = _row("aoti", [1.0, 30.0, 1.1, 100.0])
    table = format_report([steady, noisy])
    head = [c.strip() for c in table.splitlines()[0].split("|")]
    assert ["min ms", "median ms", "p90 ms"] == head[
        head.index("min ms") : head.index("p90 ms") + 1
    ]
    assert "| 1.00 " in table and "| 100.00 " in table  # aoti's min and p90
    assert spread_warning([steady]) == ""
    warning = spread_warning([steady, noisy])
    assert warning.startswith("warning:") and "aoti 100.0x" in warning and "onnx" not in warning


def test_report_table_says_what_each_target_made_of_the_scan():
    from ssmscan._cli_report import format_report

    table = format_report(
        [
            _row("export", [1.0], {"ssmscan.selective_scan_fwd.default": 2}),
            _row("onnx", [1.0], {"higher_order.scan": 2}),
            _row("aoti", [1.0], {"higher_order.scan": 2}),
            _row(
                "executorch",
                [1.0],
                {"higher_order.executorch_call_delegate": 17, "higher_order.scan": 2},
            ),
        ]
    )
    cells = {
        line.split("|")[1].strip(): line.split("|")[5].strip() for line in table.splitlines()[2:]
    }
    assert cells == {
        "export": "ssmscan.selective_scan_fwd.default x2",  # a true leftover: needs ssmscan
        "onnx": "scan x2 -> ONNX Scan",
        "aoti": "scan x2 -> C++ loop",
        "executorch": "delegate x17 -> XNNPACK, scan x2 -> ExecuTorch loop",
    }


def test_report_compile_target_leaves_the_inputs_unmarked():
    """The compile row's dynamic mark stays on its own copy of the ids: marked on the shared ids it
    made every later target's export see a dynamic length (TensorRT's static lowering declined)."""
    import torch

    from ssmscan._cli_report import _build
    from ssmscan.models import build_model

    ids = torch.randint(0, 256, (1, 16))
    _build("compile", build_model("tiny").eval(), ids, True, None)
    assert not getattr(ids, "_dynamo_dynamic_indices", None)
