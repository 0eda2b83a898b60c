"""A Mamba-2-style block (``blocks.SSDBlock``: ``ssmscan.ssd_scan`` with grouped B/C, D, gate z,
dt bias and softplus) on every target: ``"export"`` keeps one ``ssd_scan_fwd`` node at a dynamic
length and round-trips through ``torch.export.save``/``load``; the ONNX (``Scan`` loop or
``LinearAttention``), AOTInductor and ExecuTorch artifacts, exported once with a dynamic length,
run in a fresh process where ssmscan cannot be imported at L 1, 7 and 1000 and match eager; the
graph handed to Torch-TensorRT at a static odd length holds only converter-registry ops, and its
partitioner (dry run) puts every op in one engine.

AOTInductor and ExecuTorch builds take 30-60 s on 2 cores: marked slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from blocks import SSDBlock, block_inputs
from extras import needs_executorch
from torch.export import Dim

import ssmscan
from ssmscan.export._common import ExportReport, flat_outputs
from ssmscan.export.tensorrt import lower_for_tensorrt, tensorrt_dry_run
from ssmscan.passes import check_tensorrt_ready
from ssmscan.testing import assert_close_to_reference

LENGTHS = (1, 7, 1000)
DYNAMIC_L = ({1: Dim("L", min=1, max=4096)},)


def _onnx_missing() -> str | None:
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as e:
        return f"needs the onnx extra ({e})"
    return None


def _onnx(id_: str) -> object:
    marks = [pytest.mark.onnx, pytest.mark.skipif(_onnx_missing() is not None, reason="onnx")]
    return pytest.param(id_, marks=marks, id=id_)


ARTIFACTS = {
    # id: (target, extra keywords, file name)
    "onnx-scan": ("onnx", {}, "ssd.onnx"),
    "onnx-linear-attention": ("onnx", {"onnx_linear_attention": True}, "ssd_la.onnx"),
    "aoti": ("aoti", {}, "ssd.pt2"),
    "executorch": ("executorch", {}, "ssd.pte"),
}


@pytest.fixture(scope="module")
def ssd_artifact(tmp_path_factory):
    """``ExportResult`` per artifact id, exported once from ``SSDBlock`` at batch 2, L 9, with a
    dynamic length (and a dynamic batch where the target has one)."""
    cache = {}

    def get(id_: str):
        if id_ not in cache:
            target, extra, name = ARTIFACTS[id_]
            path = str(tmp_path_factory.mktemp(id_) / name)
            cache[id_] = ssmscan.export(
                SSDBlock().eval(),
                (block_inputs(9),),
                target=target,
                dynamic_shapes=DYNAMIC_L,
                path=path,
                **extra,
            )
        return cache[id_]

    return get


# A fresh interpreter (-I) where ``import ssmscan`` fails: the artifact needs only its runtime.
FRESH = textwrap.dedent(
    """
    import json, sys
    sys.modules["ssmscan"] = None  # import ssmscan -> ImportError
    import numpy as np
    kind, path, data = sys.argv[1:4]
    arrays = np.load(data)
    xs = [arrays[f"x{i}"] for i in range(len(arrays.files))]
    if kind == "onnx":
        import onnxruntime as ort
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        ops = sorted({n.op_type for n in __import__("onnx").load(path).graph.node})
        outs = [sess.run(None, {sess.get_inputs()[0].name: x})[0] for x in xs]
    elif kind == "aoti":
        import torch
        runner = torch._inductor.aoti_load_package(path)
        ops = []
        outs = [runner(torch.from_numpy(x)).numpy() for x in xs]
    else:
        import torch
        from executorch.runtime import Runtime
        method = Runtime.get().load_program(path).load_method("forward")
        ops = []
        outs = [method.execute([torch.from_numpy(x)])[0].numpy() for x in xs]
    np.savez(data.replace(".npz", "_out.npz"), *outs)
    print("FRESH_OK " + json.dumps(ops))
    """
)


def _check_fresh(id_: str, ssd_artifact, tmp_path) -> list[str]:
    import numpy as np

    res = ssd_artifact(id_)
    model = SSDBlock().eval()
    xs = [block_inputs(L) for L in LENGTHS]
    data = str(tmp_path / "in.npz")
    np.savez(data, **{f"x{i}": x.numpy() for i, x in enumerate(xs)})
    script = tmp_path / "fresh.py"
    script.write_text(FRESH)
    kind = ARTIFACTS[id_][0]
    proc = subprocess.run(
        [sys.executable, "-I", str(script), kind, res.path, data],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and "FRESH_OK" in proc.stdout, proc.stderr[-3000:]
    outs = np.load(data.replace(".npz", "_out.npz"))
    for i, x in enumerate(xs):
        with torch.no_grad():
            want = model(x)
        got = torch.from_numpy(outs[f"arr_{i}"])
        assert_close_to_reference(f"{id_} fresh, L={x.shape[1]}", got, want, torch.float32)
    return json.loads(proc.stdout.split("FRESH_OK ", 1)[1])


@pytest.mark.parametrize("id_", [_onnx("onnx-scan"), _onnx("onnx-linear-attention")])
def test_onnx_artifact_runs_in_a_fresh_process_without_ssmscan(id_, ssd_artifact, tmp_path):
    ops = _check_fresh(id_, ssd_artifact, tmp_path)
    if id_ == "onnx-scan":
        assert "Scan" in ops and "LinearAttention" not in ops, ops
    else:
        assert "LinearAttention" in ops and "Scan" not in ops, ops
    assert ssd_artifact(id_).signature.dims["L"] == (1, 4096)


@pytest.mark.slow
def test_aoti_artifact_runs_in_a_fresh_process_without_ssmscan(ssd_artifact, tmp_path):
    _check_fresh("aoti", ssd_artifact, tmp_path)
    assert ssd_artifact("aoti").report.realization == "loop"


@pytest.mark.slow
@needs_executorch
def test_executorch_artifact_runs_in_a_fresh_process_without_ssmscan(ssd_artifact, tmp_path):
    _check_fresh("executorch", ssd_artifact, tmp_path)
    assert ssd_artifact("executorch").report.realization == "loop"


def test_export_keeps_one_ssd_node_at_a_dynamic_length_and_round_trips(tmp_path):
    model = SSDBlock().eval()
    path = str(tmp_path / "ssd_ep.pt2")
    res = ssmscan.export(model, (block_inputs(9),), dynamic_shapes=DYNAMIC_L, path=path)
    assert res.report.leftover_ops == {"ssmscan.ssd_scan_fwd.default": 1}, res.report.leftover_ops
    loaded = torch.export.load(path).module()
    for L in LENGTHS:
        x = block_inputs(L)
        with torch.no_grad():
            want = model(x)
            got = loaded(x)
        assert_close_to_reference(f"loaded program, L={L}", got, want, torch.float32)
        assert_close_to_reference(f"ExportResult.run, L={L}", res.run(x)[0], want, torch.float32)


@pytest.mark.parametrize("L", [pytest.param(1, marks=pytest.mark.slow), 37], ids=["L1", "L37"])
def test_tensorrt_graph_at_a_static_length_holds_only_registry_ops(L):
    model, x = SSDBlock().eval(), block_inputs(L)
    report = ExportReport("tensorrt")
    ep = lower_for_tensorrt(torch.export.export(model, (x,)), "auto", report)
    readiness = check_tensorrt_ready(ep)
    assert readiness.ready, readiness
    assert not any(str(n.target).startswith("ssmscan") for n in ep.graph.nodes)
    with torch.no_grad():
        assert_close_to_reference("lowered", ep.module()(x), model(x), torch.float32)


@pytest.mark.tensorrt
def test_tensorrt_dry_run_puts_every_op_in_one_engine(torch_tensorrt):
    model, x = SSDBlock().eval(), block_inputs(37)
    result = tensorrt_dry_run(model, (x,))
    assert result.all_in_tensorrt, (result.unsupported, result.engines, result.torch_blocks)
    assert result.readiness.ready and not result.report.leftover_ops
    with torch.no_grad():
        want = model(x)
    assert_close_to_reference("dry run", flat_outputs(result.graph(x))[0], want, torch.float32)
