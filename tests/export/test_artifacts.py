"""The built-in language models' artifacts as a user gets them: named ``input_ids -> logits``,
dynamic batch and length, loading and running in a fresh process where ssmscan cannot be
imported, clean errors for wrong inputs (never an abort or a silent wrong result), temporary
folders removed, a quiet console; ``ssmscan.export`` callable with its target modules reachable.

An AOTInductor compile of the tiny LM takes 20-70 s on 2 cores: each artifact is built once per
module and shared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.export import Dim

import ssmscan
from ssmscan.export import ExportResult
from ssmscan.models import build_model
from ssmscan.testing import rel_error, tolerance

TOL = tolerance(torch.float32)
SRC = os.path.dirname(os.path.dirname(ssmscan.__file__))
# (batch, length) pairs run on one artifact exported at batch 1, length 9
SHAPES = [(1, 9), (3, 5), (3, 40)]


def _onnx_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        return False
    return True


needs_onnx = pytest.mark.skipif(not _onnx_available(), reason="needs the onnx extra")
ONNX = pytest.param("onnx", marks=[pytest.mark.onnx, needs_onnx])


def _seq_len() -> tuple[dict[int, Dim], ...]:
    return ({1: Dim("seq_len", min=2, max=4096)},)


@pytest.fixture(scope="module")
def lm_artifact(tmp_path_factory):
    """``(model, ExportResult)`` per (preset, target), exported once at batch 1 with a dynamic
    length (the batch is dynamic by default)."""
    cache: dict[tuple[str, str], tuple[torch.nn.Module, ExportResult]] = {}

    def get(preset: str, target: str) -> tuple[torch.nn.Module, ExportResult]:
        if (preset, target) not in cache:
            model = build_model(preset).eval()
            ids = torch.randint(0, model.config.vocab_size, (1, 9))
            d = tmp_path_factory.mktemp(f"{preset}-{target}")
            path = str(d / ("model.onnx" if target == "onnx" else "model.pt2"))
            res = ssmscan.export(model, (ids,), target=target, dynamic_shapes=_seq_len(), path=path)
            cache[preset, target] = model, res
        return cache[preset, target]

    return get


# A fresh interpreter (-I: no user site, no cwd) where ``import ssmscan`` fails even if ssmscan
# is installed: the artifact must need torch / onnxruntime only.
FRESH = textwrap.dedent(
    """
    import json, sys
    sys.modules["ssmscan"] = None  # import ssmscan -> ImportError
    import numpy as np
    kind, path, data = sys.argv[1:4]
    arrays = np.load(data)
    xs = [arrays[k] for k in sorted(arrays.files, key=lambda k: int(k[1:]))]
    meta = {}
    if kind == "onnx":
        import onnxruntime as ort
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        meta["inputs"] = [[i.name, i.type, list(i.shape)] for i in sess.get_inputs()]
        meta["outputs"] = [[o.name, o.type, list(o.shape)] for o in sess.get_outputs()]
        outs = [sess.run(None, {"input_ids": x})[0] for x in xs]
    else:
        import torch
        runner = torch._inductor.aoti_load_package(path)
        outs = [runner(torch.from_numpy(x)) for x in xs]
        meta["types"] = [type(o).__name__ for o in outs]
        outs = [o.numpy() for o in outs]
    np.savez(data.replace(".npz", "_out.npz"), *outs)
    print("FRESH_OK " + json.dumps(meta))
    """
)


def _fresh(script: str, tmp_path, *args: str, env: dict | None = None):
    path = tmp_path / "fresh.py"
    path.write_text(script)
    return subprocess.run(
        [sys.executable, "-I", str(path), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )


def _check_fresh(preset, target, lm_artifact, tmp_path):
    import numpy as np

    model, res = lm_artifact(preset, target)
    g = torch.Generator().manual_seed(3)
    xs = [torch.randint(0, model.config.vocab_size, s, generator=g) for s in SHAPES]
    data = str(tmp_path / "in.npz")
    np.savez(data, **{f"x{i}": x.numpy() for i, x in enumerate(xs)})
    proc = _fresh(FRESH, tmp_path, target, res.path, data)
    assert proc.returncode == 0 and "FRESH_OK" in proc.stdout, proc.stderr[-3000:]
    meta = json.loads(proc.stdout.split("FRESH_OK ", 1)[1])
    outs = np.load(data.replace(".npz", "_out.npz"))
    for i, x in enumerate(xs):
        with torch.no_grad():
            want = model(x)[0]
        got = torch.from_numpy(outs[f"arr_{i}"])
        assert got.shape == want.shape, f"batch/length {tuple(x.shape)}: {got.shape}"
        err = rel_error(got, want)
        assert err <= TOL, f"{preset} {target} fresh, {tuple(x.shape)}: {err:.2e}"
    return meta


@pytest.mark.parametrize("target", [ONNX, "aoti"])
def test_tiny_lm_artifact_runs_in_a_fresh_process_without_ssmscan(target, lm_artifact, tmp_path):
    meta = _check_fresh("tiny", target, lm_artifact, tmp_path)
    if target == "onnx":
        assert meta["inputs"] == [["input_ids", "tensor(int64)", ["batch", "seq_len"]]]
        assert meta["outputs"] == [["logits", "tensor(float)", ["batch", "seq_len", 256]]]
    else:
        assert meta["types"] == ["Tensor"] * len(SHAPES)  # logits, a plain tensor


@pytest.mark.slow
@pytest.mark.parametrize("target", [ONNX, "aoti"])
def test_small_lm_artifact_runs_in_a_fresh_process_without_ssmscan(target, lm_artifact, tmp_path):
    _check_fresh("small", target, lm_artifact, tmp_path)


@pytest.mark.parametrize("target", ["export", ONNX, "aoti"])
def test_signature_names_inputs_outputs_and_dims(target, lm_artifact):
    if target == "export":
        model = build_model("tiny").eval()
        res = ssmscan.export(model, (torch.randint(0, 256, (1, 9)),), dynamic_shapes=_seq_len())
    else:
        _, res = lm_artifact("tiny", target)
    sig = res.signature
    assert sig.input_names == ["input_ids"] and sig.output_names == ["logits"]
    assert sig.inputs[0].shape == ("batch", "seq_len") and sig.inputs[0].value_range == (0, 256)
    assert sig.outputs[0].shape == ("batch", "seq_len", 256)
    assert sig.dims == {"batch": (1, None), "seq_len": (2, 4096)}
    text = res.describe()
    assert "input_ids: int64[batch, seq_len] in [0, 256)" in text
    assert "logits: float32[batch, seq_len, 256]" in text


BAD_INPUTS = {
    "int32": (lambda: torch.randint(0, 256, (1, 5), dtype=torch.int32), TypeError, "int32"),
    "float": (lambda: torch.rand(1, 5) * 10, TypeError, "float32"),
    "rank3": (lambda: torch.randint(0, 256, (1, 5, 2)), ValueError, r"shape \(1, 5, 2\)"),
    "negative": (lambda: torch.tensor([[1, -1, 2]]), ValueError, "from -1 to 2"),
    "out-of-vocab": (lambda: torch.tensor([[1, 256, 2]]), ValueError, "from 1 to 256"),
    "too-short": (lambda: torch.randint(0, 256, (1, 1)), ValueError, r"seq_len.*\[2, 4096\]"),
    "two-inputs": (lambda: (torch.zeros(1, 4, dtype=torch.long),) * 2, ValueError, "1 input"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
@pytest.mark.parametrize("target", [ONNX, "aoti"])
def test_run_rejects_wrong_inputs(target, case, lm_artifact):
    _, res = lm_artifact("tiny", target)
    make, error, match = BAD_INPUTS[case]
    x = make()
    with pytest.raises(error, match=match):
        res.run(*(x if isinstance(x, tuple) else (x,)))


def test_run_takes_non_contiguous_ids(lm_artifact):
    model, res = lm_artifact("tiny", "aoti")
    ids = torch.randint(0, 256, (7, 3)).t()  # (3, 7), strides (1, 3)
    (got,) = res.run(ids)
    with torch.no_grad():
        want = model(ids)[0]
    assert rel_error(got, want) <= TOL


# Wrong inputs given straight to the AOTInductor package, where ssmscan is not there to check:
# each must raise (never abort the process, never return a result). Ids out of range (and ids
# of another dtype, read as out-of-range int64) are checked inside the package; a wrong rank
# needs AOTInductor's own input checks, which AOTI_RUNTIME_CHECK_INPUTS=1 turns on.
FRESH_BAD = textwrap.dedent(
    """
    import sys
    sys.modules["ssmscan"] = None
    import torch
    runner = torch._inductor.aoti_load_package(sys.argv[1])
    cases = {
        "int32": torch.randint(0, 256, (1, 5), dtype=torch.int32),
        "float": torch.rand(1, 5) * 10,
        "negative": torch.tensor([[1, -1, 2]]),
        "out-of-vocab": torch.tensor([[1, 256, 2]]),
        "rank3": torch.randint(0, 256, (1, 5, 2)),
        "batch-one": torch.randint(0, 256, (1, 5)),  # valid: must pass the checks
    }
    for name in sys.argv[2].split(","):
        try:
            out = runner(cases[name])
        except RuntimeError as e:
            print(f"{name}: raised {str(e).splitlines()[0][:200]}", flush=True)
        else:
            print(f"{name}: returned {tuple(out.shape)}", flush=True)
    """
)


@pytest.mark.parametrize(
    ("cases", "checks_on"),
    [("int32,float,negative,out-of-vocab", False), ("int32,float,rank3,batch-one", True)],
    ids=["in-package-id-checks", "AOTI_RUNTIME_CHECK_INPUTS"],
)
def test_aoti_package_raises_on_wrong_inputs_in_a_fresh_process(
    cases, checks_on, lm_artifact, tmp_path
):
    _, res = lm_artifact("tiny", "aoti")
    env = dict(os.environ)
    env.pop("AOTI_RUNTIME_CHECK_INPUTS", None)
    if checks_on:
        env["AOTI_RUNTIME_CHECK_INPUTS"] = "1"
    proc = _fresh(FRESH_BAD, tmp_path, res.path, cases, env=env)
    assert proc.returncode == 0, f"rc {proc.returncode}: {proc.stdout}\n{proc.stderr[-2000:]}"
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    # the package's own check, or AOTInductor's input check (which names input_handles[i])
    expected = (
        "input_handles[0]" if checks_on else "input_ids must hold int64 token ids in [0, 256)"
    )
    if checks_on:
        # Inductor's input checks assume dynamic sizes >= 2 unless told not to check lower
        # bounds: a batch of 1 must pass them
        assert lines.get("batch-one") == "returned (1, 5, 256)", (lines, proc.stderr[-2000:])
    for name in cases.split(","):
        if name == "batch-one":
            continue
        said = lines.get(name, "")
        assert said.startswith("raised") and expected in said, (name, said, proc.stderr[-2000:])


# An export without ``path`` from a user's script: nothing of torch's or onnxscript's internal
# chatter on the console, and no ssmscan-<target>-* folder left once the process exits.
FRESH_TEMP = textwrap.dedent(
    """
    import gc, os, sys
    sys.path.insert(0, sys.argv[1])
    import torch, ssmscan
    from ssmscan.models import build_model
    target = sys.argv[2]
    model = build_model("tiny").eval()
    res = ssmscan.export(model, (torch.randint(0, 256, (1, 6)),), target=target)
    print("KEPT", os.path.dirname(res.path), flush=True)
    assert os.path.exists(res.path)
    res2 = ssmscan.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),), target=target)
    folder = os.path.dirname(res2.path)
    del res2
    gc.collect()
    print("DROPPED", folder, os.path.exists(folder), flush=True)
    """
)


@pytest.mark.parametrize("target", [ONNX, pytest.param("aoti", marks=pytest.mark.slow)])
def test_temporary_folders_removed_and_console_quiet(target, tmp_path):
    proc = _fresh(FRESH_TEMP, tmp_path, SRC, target)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kept = proc.stdout.split("KEPT ", 1)[1].split()[0]
    dropped, exists = proc.stdout.split("DROPPED ", 1)[1].split()[:2]
    assert os.path.basename(kept).startswith(f"ssmscan-{target}-")
    assert exists == "False", f"{dropped} still exists after the result was dropped"
    assert not os.path.exists(kept), f"{kept} left behind after the process exited"
    for noise in ("torchvision", "LeafSpec", "deduplication", "failed while attempting"):
        assert noise not in proc.stderr, proc.stderr[-3000:]


def test_noise_filters_are_restored_after_the_call():
    import logging
    import warnings

    from ssmscan.export._common import quiet_known_noise

    name = "torch.onnx._internal.exporter._registration"
    before = (list(warnings.filters), list(logging.getLogger(name).filters))
    with quiet_known_noise():
        assert logging.getLogger(name).filters
    assert (list(warnings.filters), list(logging.getLogger(name).filters)) == before


def test_export_is_callable_and_its_target_modules_reachable():
    from ssmscan.export.tensorrt import tensorrt_dry_run

    assert callable(ssmscan.export)
    assert ssmscan.export is sys.modules["ssmscan.export"]
    assert ssmscan.export.tensorrt.tensorrt_dry_run is tensorrt_dry_run
    model = build_model("tiny").eval()
    ids = torch.randint(0, 256, (2, 5))
    res = ssmscan.export(model, (ids,), target="export")
    (logits,) = res.run(ids)
    with torch.no_grad():
        assert rel_error(logits, model(ids)[0]) <= TOL


def test_submodule_reachable_in_a_fresh_process(tmp_path):
    """``ssmscan.export.tensorrt`` without importing it first (as the TensorRT error message
    tells users to call it)."""
    script = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        import ssmscan
        print(ssmscan.export.tensorrt.tensorrt_dry_run.__name__, callable(ssmscan.export))
        """
    )
    proc = _fresh(script, tmp_path, SRC)
    assert "tensorrt_dry_run True" in proc.stdout, proc.stderr[-2000:]


@needs_onnx
@pytest.mark.onnx
@pytest.mark.slow
def test_stateful_onnx_continues_a_prefill(tmp_path):
    model = build_model("tiny").eval()
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 256, (2, 12), generator=g)
    res = ssmscan.export(
        model,
        (ids[:, :4],),
        target="onnx",
        dynamic_shapes=({1: Dim("seq_len", min=2, max=4096)},),
        stateful=True,
        path=str(tmp_path / "step.onnx"),
    )
    kinds = ["conv_state_0", "conv_state_1", "ssm_state_0", "ssm_state_1"]
    assert res.signature.input_names == ["input_ids", *kinds]
    assert res.signature.output_names == ["logits", *(f"next_{k}" for k in kinds)]
    assert res.signature.inputs[3].shape == ("batch", 128, 16)
    cfg = model.config
    zeros = [torch.zeros(2, cfg.d_inner, cfg.d_conv)] * 2 + [torch.zeros(2, cfg.d_inner, 16)] * 2
    first = res.run(ids[:, :5], *zeros)
    second = res.run(ids[:, 5:], *first[1:])
    with torch.no_grad():
        want = model(ids)[0]
    got = torch.cat([first[0], second[0]], dim=1)
    assert rel_error(got, want) <= TOL


@needs_onnx
@pytest.mark.onnx
def test_stateful_onnx_continues_a_mamba2_prefill(tmp_path):
    from ssmscan.models import Mamba2Config, Mamba2LM

    model = Mamba2LM.from_config(Mamba2Config.preset("tiny")).eval()
    cfg = model.config
    g = torch.Generator().manual_seed(6)
    ids = torch.randint(0, cfg.vocab_size, (2, 11), generator=g)
    res = ssmscan.export(
        model,
        (ids[:, :4],),
        target="onnx",
        dynamic_shapes=({1: Dim("seq_len", min=1, max=4096)},),
        stateful=True,
        path=str(tmp_path / "step2.onnx"),
    )
    n = cfg.n_layer
    conv_shape = ("batch", cfg.conv_dim, cfg.d_conv)
    ssm_shape = ("batch", cfg.nheads, cfg.headdim, cfg.d_state)
    assert res.signature.inputs[1].shape == conv_shape
    assert res.signature.inputs[1 + n].shape == ssm_shape
    zeros = [torch.zeros(2, *conv_shape[1:])] * n + [torch.zeros(2, *ssm_shape[1:])] * n
    first = res.run(ids[:, :6], *zeros)
    second = res.run(ids[:, 6:7], *first[1:])  # one decode-sized step
    third = res.run(ids[:, 7:], *second[1:])
    with torch.no_grad():
        want = model(ids)[0]
    got = torch.cat([first[0], second[0], third[0]], dim=1)
    assert rel_error(got, want) <= TOL


def test_stateful_needs_a_mamba_lm():
    with pytest.raises(ValueError, match="stateful=True"):
        ssmscan.export(torch.nn.Linear(3, 3), (torch.randn(2, 3),), stateful=True)
    with pytest.raises(ValueError, match="static batch"):
        ssmscan.export(torch.nn.Linear(3, 3), (torch.randn(2, 3),), "tensorrt", dynamic_batch=True)
