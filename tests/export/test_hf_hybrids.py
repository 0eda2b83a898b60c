"""The transformers attention hybrids (tiny, random, on ssmscan ops) through the static-length
targets: Torch-TensorRT's graph is ready (the attention's constant factories become
``aten.full``) and equals eager; ExecuTorch runs them with a dynamic length up to a bound whose
memory plan fits, also in a fresh process without ssmscan, and refuses a bound whose plan
cannot fit (attention's L x L scores) by saying so, where its runtime raised ``std::bad_alloc``.

Each builds a model and a program per family: slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.export import Dim

pytest.importorskip("transformers", reason="the hybrids are transformers models (the hf extra)")

from extras import needs_executorch

from ssmscan._cli_hf_models import load_hf_tiny
from ssmscan.export import TargetUnavailable, export
from ssmscan.export._common import ExportReport
from ssmscan.export.tensorrt import lower_for_tensorrt
from ssmscan.passes import check_tensorrt_ready
from ssmscan.testing import rel_error, tolerance

pytestmark = pytest.mark.slow

HYBRIDS = ["bamba", "nemotron_h", "falcon_h1", "zamba2", "jamba", "zamba"]
TOL = tolerance(torch.float32)


def _ids(length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (1, length), generator=torch.Generator().manual_seed(seed))


def _eager(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids)


@pytest.mark.parametrize("family", HYBRIDS)
def test_tensorrt_graph_ready_and_equal_to_eager(family):
    model = load_hf_tiny(f"hf-{family}-tiny").module
    ids = _ids(64)
    ep = lower_for_tensorrt(torch.export.export(model, (ids,)), "auto", ExportReport("tensorrt"))
    readiness = check_tensorrt_ready(ep)
    assert readiness.ready, readiness
    assert rel_error(ep.module()(ids), _eager(model, ids)) <= TOL
    try:
        export(model, (ids,), target="tensorrt")
    except TargetUnavailable as e:  # no TensorRT runtime here: the graph was checked first
        assert "check_tensorrt_ready: ready" in str(e)


# Runs the .pte with ExecuTorch's runtime where `import ssmscan` fails.
FRESH = textwrap.dedent(
    """
    import sys
    sys.modules["ssmscan"] = None
    import torch
    from executorch.runtime import Runtime
    path, data = sys.argv[1:3]
    method = Runtime.get().load_program(path).load_method("forward")
    inputs = torch.load(data)
    torch.save([method.execute([x])[0] for x in inputs], data + ".out")
    print("FRESH_OK")
    """
)


@needs_executorch
@pytest.mark.parametrize("family", HYBRIDS)
def test_executorch_dynamic_length_within_a_fitting_bound(family, tmp_path):
    model = load_hf_tiny(f"hf-{family}-tiny").module
    path = tmp_path / "model.pte"
    res = export(
        model,
        (_ids(64),),
        target="executorch",
        dynamic_shapes=({1: Dim("seq_len", min=2, max=256)},),
        path=str(path),
    )
    inputs = [_ids(n, seed=n) for n in (64, 37, 256)]
    for ids in inputs:
        assert rel_error(res.run(ids)[0], _eager(model, ids)) <= TOL, ids.shape
    data = tmp_path / "inputs.pt"
    torch.save(inputs, data)
    script = tmp_path / "fresh.py"
    script.write_text(FRESH)
    proc = subprocess.run(
        [sys.executable, "-I", str(script), str(path), str(data)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and "FRESH_OK" in proc.stdout, proc.stderr[-3000:]
    for ids, got in zip(inputs, torch.load(str(data) + ".out"), strict=True):
        assert rel_error(got, _eager(model, ids)) <= TOL, ids.shape


def _physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@needs_executorch
def test_report_builds_executorch_static_where_the_bound_cannot_fit(tmp_path):
    # bamba's plan at the report's bound (seq_len <= 65536) is 208 GiB
    if _physical_memory() >= 208 * 2**30:
        pytest.skip("this machine holds the 208 GiB plan: the report keeps the dynamic length")
    out = tmp_path / "report.json"
    cmd = ["report", "--model", "hf-bamba-tiny", "--seq-len", "64", "--reps", "1"]
    proc = subprocess.run(
        [sys.executable, "-m", "ssmscan", *cmd, "--targets", "tensorrt,executorch", "--json", out],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["target"]: r for r in json.loads(out.read_text())["targets"]}
    assert rows["tensorrt"]["status"] == "unavailable"
    assert "check_tensorrt_ready: ready" in rows["tensorrt"]["reason"]
    et = rows["executorch"]
    assert et["status"] == "ok" and et["shapes"] == "static", et
    assert et["reason"].startswith("built at a static length: PlanTooLarge"), et["reason"]
    assert "seq_len <= 65536" in et["reason"] and "self_attn" in et["reason"]
