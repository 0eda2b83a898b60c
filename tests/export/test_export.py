"""``ssmscan.export``: every CPU target matches eager on the Mamba-style block at L in {1, 7, 1000}
and with a dynamic L; ONNX and AOTInductor artifacts run in a fresh process without ssmscan."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from blocks import ScanBlock, block_inputs

import ssmscan
from ssmscan.export import ExportResult, TargetUnavailable
from ssmscan.testing import rel_error, tolerance

TOL = tolerance(torch.float32)
LENGTHS = [1, 7, 1000]


def _onnx_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        return False
    return True


needs_onnx = pytest.mark.skipif(not _onnx_available(), reason="needs the onnx extra")


@pytest.fixture(scope="module")
def block():
    return ScanBlock().eval()


@pytest.fixture(scope="module")
def dynamic_artifacts(block, tmp_path_factory):
    """Dynamic-L exports built once per module (an AOTI compile takes ~25 s on 2 cores)."""
    cache: dict[str, ExportResult] = {}

    def get(target):
        if target not in cache:
            d = tmp_path_factory.mktemp(target)
            suffix = "onnx" if target == "onnx" else "pt2"
            cache[target] = ssmscan.export(
                block,
                (block_inputs(7),),
                target=target,
                dynamic_shapes=_dyn_L(),
                path=str(d / f"m.{suffix}"),
            )
        return cache[target]

    return get


def _dyn_L():
    return ({1: torch.export.Dim("L", min=1, max=16384)},)


def _check(res, block, lengths):
    for L in lengths:
        x = block_inputs(L)
        with torch.no_grad():
            want = block(x)
        (got,) = res.run(x)
        assert got.shape == want.shape
        err = rel_error(got, want)
        assert err <= TOL, f"{res.target} L={L}: rel err {err:.2e} > {TOL:.0e}"


@pytest.mark.parametrize("L", LENGTHS, ids=lambda n: f"L{n}")
def test_export_target_keeps_op_and_matches_eager(block, L):
    res = ssmscan.export(block, (block_inputs(L),), target="export")
    assert res.report.leftover_ops == {"ssmscan.selective_scan_fwd.default": 1}
    assert res.report.realization == "kernel" and "export" in res.report.stage_seconds
    _check(res, block, [L])


def test_export_target_dynamic_length(block):
    res = ssmscan.export(block, (block_inputs(7),), target="export", dynamic_shapes=_dyn_L())
    _check(res, block, LENGTHS)


@needs_onnx
@pytest.mark.onnx
@pytest.mark.parametrize("realization", ["parallel", "loop"])
@pytest.mark.parametrize("L", LENGTHS, ids=lambda n: f"L{n}")
def test_onnx_static(block, L, realization, tmp_path):
    path = str(tmp_path / "m.onnx")
    res = ssmscan.export(
        block, (block_inputs(L),), target="onnx", path=path, realization=realization
    )
    assert res.path == path and res.report.artifact_bytes > 0
    assert res.report.realization == realization
    assert not any("ssmscan" in k for k in res.report.op_counts)
    if realization == "parallel":
        assert res.report.leftover_ops == {}, res.report.leftover_ops
    _check(res, block, [L])


@needs_onnx
@pytest.mark.onnx
def test_onnx_dynamic_length_loop_by_default(block, tmp_path):
    res = ssmscan.export(
        block,
        (block_inputs(7),),
        target="onnx",
        dynamic_shapes=_dyn_L(),
        path=str(tmp_path / "m.onnx"),
    )
    assert res.report.realization == "loop"
    assert res.report.leftover_ops == {"higher_order.scan": 1}
    _check(res, block, LENGTHS)


@pytest.mark.slow
def test_aoti_static_lengths(block, tmp_path):
    for L in LENGTHS:
        res = ssmscan.export(
            block, (block_inputs(L),), target="aoti", path=str(tmp_path / f"m{L}.pt2")
        )
        _check(res, block, [L])


@pytest.mark.slow  # the default suite compiles the tiny LM's package instead (test_artifacts.py)
def test_aoti_dynamic_length(block, dynamic_artifacts):
    res = dynamic_artifacts("aoti")
    assert res.report.realization == "loop"
    assert not any("ssmscan" in k for k in res.report.op_counts)
    stages = {"export", "decompose", "aoti compile", "aoti load probe", "aoti load"}
    assert stages <= set(res.report.stage_seconds)
    _check(res, block, LENGTHS)


def test_aoti_load_probe_turns_a_killed_loader_into_an_error(monkeypatch, tmp_path):
    """Note [aoti load probe]: a package whose load kills the loading process (here the probe's
    code raises SIGSEGV itself, standing in for a library that does) raises in the caller,
    naming the signal and the compiler fix; a probe that exits with an error or succeeds lets
    the build go on to its own load."""
    import ssmscan.export.aoti as aoti

    path = str(tmp_path / "model.pt2")
    monkeypatch.setattr(
        aoti, "_LOAD_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    )
    with pytest.raises(RuntimeError, match=r"killed a fresh Python process \(SIGSEGV\).*CXX="):
        aoti.probe_load(path)
    monkeypatch.setattr(aoti, "_LOAD_PROBE", "raise SystemExit(3)")
    aoti.probe_load(path)  # not a crash: left to the in-process load
    monkeypatch.setattr(aoti, "_LOAD_PROBE", "pass")
    aoti.probe_load(path)


FRESH = textwrap.dedent(
    """
    import sys
    sys.modules["ssmscan"] = None  # import ssmscan -> ImportError, even where it is installed
    import numpy as np
    kind, path, data = sys.argv[1:4]
    arrays = np.load(data)
    if kind == "onnx":
        import onnxruntime as ort
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        outs = [sess.run(None, {name: arrays[f"x{i}"]})[0] for i in range(3)]
    else:
        import torch
        runner = torch._inductor.aoti_load_package(path)
        outs = [runner(torch.from_numpy(arrays[f"x{i}"])).numpy() for i in range(3)]
    np.savez(data.replace(".npz", "_out.npz"), *outs)
    print("FRESH_OK")
    """
)


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("onnx", marks=[pytest.mark.onnx, needs_onnx]),
        pytest.param("aoti", marks=pytest.mark.slow),
    ],
)
def test_artifact_runs_in_a_fresh_process_without_ssmscan(
    block, target, dynamic_artifacts, tmp_path
):
    import numpy as np

    res = dynamic_artifacts(target)
    xs = [block_inputs(L) for L in LENGTHS]
    data = str(tmp_path / "in.npz")
    np.savez(data, **{f"x{i}": x.numpy() for i, x in enumerate(xs)})
    script = tmp_path / "fresh.py"
    script.write_text(FRESH)
    env_py = [sys.executable, "-I", str(script), target, res.path, data]  # -I: no cwd/src on path
    proc = subprocess.run(env_py, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "FRESH_OK" in proc.stdout, proc.stderr[-2000:]
    outs = np.load(data.replace(".npz", "_out.npz"))
    for i, x in enumerate(xs):
        with torch.no_grad():
            want = block(x)
        err = rel_error(torch.from_numpy(outs[f"arr_{i}"]), want)
        assert err <= TOL, f"{target} fresh process, L={x.shape[1]}: {err:.2e}"


def test_errors_name_the_alternative(block):
    x = (block_inputs(7),)
    with pytest.raises(ValueError, match="target must be one of"):
        ssmscan.export(block, x, target="tflite")
    with pytest.raises(ValueError, match="realization must be one of"):
        ssmscan.export(block, x, target="onnx", realization="unrolled")
    with pytest.raises(ValueError, match="realization='loop'"):
        ssmscan.export(block, x, target="onnx", realization="parallel", dynamic_shapes=_dyn_L())
    with pytest.raises(ValueError, match="target='onnx' or 'aoti'"):
        ssmscan.export(block, x, target="tensorrt", dynamic_shapes=_dyn_L())
    with pytest.raises(ValueError, match="keeps the ssmscan ops"):
        ssmscan.export(block, x, target="export", realization="loop")
    with pytest.raises(TypeError, match="example_inputs must be a tuple"):
        ssmscan.export(block, x[0], target="export")


def test_report_summary_and_census(block):
    res = ssmscan.export(block, (block_inputs(7),), target="export")
    rep = res.report
    assert rep.node_count == sum(rep.op_counts.values()) > 5
    assert "selective_scan_fwd" in rep.summary() and rep.artifact_bytes is None
    assert issubclass(TargetUnavailable, RuntimeError)
