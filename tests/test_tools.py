"""The developer tools under ``tools/`` that do not need extra packages run: ``profile_models.py``
and ``profile_ssd.py`` refuse a machine without a GPU by name and, on a GPU, profile the tiny
models end to end and a small SSD step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ssmscan.testing.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    return load_script(ROOT / "tools" / f"{name}.py", name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without GPU")
def test_profile_models_without_gpu_says_so():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        _load("profile_models").main(["--models", "mamba2-tiny"])


def test_profile_models_refuses_an_unknown_family():
    with pytest.raises(SystemExit, match="family must be one of"):
        _load("profile_models").build("mamba3-tiny", torch.float32)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_profile_models_on_gpu(capsys):
    _load("profile_models").main(
        ["--models", "mamba2-tiny,mamba1-tiny", "--batches", "1", "--seq-len", "64", "--decode"]
    )
    out = capsys.readouterr().out
    for case in ("mamba2-tiny prefill b1 L64", "mamba1-tiny decode step b1"):
        assert case in out and "kernels" in out, out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without GPU")
def test_profile_ssd_without_gpu_says_so():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        _load("profile_ssd").main(["--shapes", "1,64,2,16,1,16"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_profile_ssd_on_gpu(capsys, tmp_path):
    _load("profile_ssd").main(["--shapes", "1,130,4,32,1,32", "--iters", "2",
                               "--plans", "s32=bwd_states_16:false",
                               "--mamba-src", str(tmp_path / "absent")])  # fmt: skip
    out = capsys.readouterr().out
    assert "mamba-ssm skipped" in out or "== mamba-ssm:" in out  # another test may import it
    assert "== ssmscan (planned):" in out and "== ssmscan[s32]:" in out
    assert "_ssd_scan_bwd_dx_kernel" in out
