"""The developer tools under ``tools/`` that do not need extra packages run: ``profile_models.py``
refuses a machine without a GPU by name and, on a GPU, profiles the tiny models end to end."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
