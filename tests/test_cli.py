"""The ``ssmscan`` command line, run as ``python -m ssmscan ...`` subprocesses: the report's
numbers are measurements made in that run, models from a user's file, the export artifact loads,
the benchmark writes its plot and table, every ``--help``, and bad arguments exit 2 with one line."""

from __future__ import annotations

import importlib.util
import json
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


def ssmscan(
    *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ssmscan", *args],
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
    assert any(line.startswith("| aoti") and "loop" in line for line in table)
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
    import ssmscan as _  # noqa: F401  (registers the ops the program calls)
    from ssmscan.models import build_model

    ep = torch.export.load(str(out))
    ids = torch.randint(0, 256, (1, 23))  # another length: the program is dynamic
    got = ep.module()(ids)[0]
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
def test_help(command):
    res = ssmscan(*command, "--help")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: ssmscan") and res.stderr == ""


BAD = {
    "unknown-model": ["report", "--model", "huge"],
    "unknown-target": ["report", "--targets", "eager,tpu"],
    "missing-file": ["report", "--model", "nowhere/model.py:make"],
    "not-a-factory-spec": ["report", "--model", "model.txt:make"],
    "negative-seq-len": ["report", "--seq-len", "-3"],
    "zero-reps": ["report", "--reps", "0"],
    "export-unknown-target": ["export", "--target", "tflite", "-o", "x.bin"],
    "export-no-output": ["export", "--target", "onnx"],
    "bench-bad-length": ["bench", "--lengths", "0"],
    "no-command": [],
}


@pytest.mark.parametrize("args", list(BAD.values()), ids=list(BAD))
def test_bad_arguments_exit_2_with_one_line(args, tmp_path):
    res = ssmscan(*args, cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "error:" in res.stderr and "Traceback" not in res.stderr
    assert res.stdout == ""


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
