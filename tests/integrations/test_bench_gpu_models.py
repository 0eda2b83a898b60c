"""benchmarks/integrations/bench_gpu_models.py off the GPU: its command line, the mamba-ssm config
it derives, its correctness gate, a CPU smoke run of ssmscan alone, and (slow, with mamba-ssm's
source at ``$MAMBA_SSM_SRC`` or /tmp/mb/mamba_ssm-2.3.2.post1) the check that mamba-ssm's
``MambaLMHeadModel`` built from that config and loaded with ssmscan's weights is the same model.
A broken benchmark must fail here, not in a lent GPU's call."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ssmscan.models import Mamba2Config, Mamba2LM, MambaConfig, MambaLM
from ssmscan.testing import tolerance
from ssmscan.testing.scripts import load_script

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "integrations" / "bench_gpu_models.py"
MAMBA_SSM_SRC = Path(os.environ.get("MAMBA_SSM_SRC", "/tmp/mb/mamba_ssm-2.3.2.post1"))
SMOKE = ["--device", "cpu", "--models", "mamba2-tiny,mamba1-tiny", "--gate-len", "37",
         "--gate-steps", "3"]  # fmt: skip


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH, "_bench_gpu_models")


def test_models_parse_and_unknown_ones_are_refused(bench, capsys):
    args = bench.parse_args(["--device", "cpu", "--models", "mamba2-2.7b,mamba1-130m",
                             "--prefill-batches", "1,8"])  # fmt: skip
    assert args.models == [("mamba2", "2.7b"), ("mamba1", "130m")]
    assert args.prefill_batches == [1, 8] and args.dtype == "bf16"
    for bad, word in (("mamba3-130m", "family"), ("mamba2-2.8b", "unknown mamba2 preset")):
        with pytest.raises(SystemExit):
            bench.parse_args(["--device", "cpu", "--models", bad])
        assert word in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(["--device", "cpu", "--decode-batches", "0"])
    assert "positive ints" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["mamba2", "mamba1"])
def test_mamba_ssm_config_is_the_presets(bench, family):
    cfg = bench.ssmscan_config(family, "130m")
    kw = bench.mamba_ssm_config_kwargs(cfg)
    assert (kw["d_model"], kw["n_layer"], kw["vocab_size"]) == (768, 24, 50277)
    assert kw["rms_norm"] and kw["fused_add_norm"] and kw["residual_in_fp32"]
    assert kw["d_intermediate"] == 0 and kw["tie_embeddings"]
    if family == "mamba2":
        assert kw["pad_vocab_size_multiple"] == 16
        picked = ("layer", "d_state", "headdim", "ngroups", "chunk_size")
        assert [kw["ssm_cfg"][k] for k in picked] == ["Mamba2", 128, 64, 1, 256]
    else:
        assert kw["pad_vocab_size_multiple"] == 8
        assert kw["ssm_cfg"]["layer"] == "Mamba1" and kw["ssm_cfg"]["d_state"] == 16


def test_mamba_ssm_config_refuses_what_mamba_ssm_cannot_express(bench):
    with pytest.raises(ValueError, match="eps 1e-5"):
        bench.mamba_ssm_config_kwargs(
            Mamba2Config(d_model=64, n_layer=2, vocab_size=256, rms_norm_eps=1e-6)
        )
    with pytest.raises(TypeError, match="MambaConfig or Mamba2Config"):
        bench.mamba_ssm_config_kwargs({"d_model": 64})


def test_state_dict_names_get_the_backbone_prefix(bench):
    names = bench.mamba_ssm_state_dict(MambaLM(MambaConfig.preset("tiny")))
    assert "backbone.layers.1.mixer.dt_proj.bias" in names and "lm_head.weight" in names
    assert "backbone.embedding.weight" in names and not any(
        k.startswith("backbone.lm_head") for k in names
    )


@pytest.mark.parametrize("family", ["mamba2", "mamba1"])
def test_gate_passes_the_model_and_stops_a_wrong_layer(bench, family):
    """ssmscan alone: its bf16 model passes against its float32 copy; with one layer's out_proj
    perturbed the gate raises, naming the layer checks."""
    cls = Mamba2LM if family == "mamba2" else MambaLM
    ours = cls(bench.ssmscan_config(family, "tiny")).eval().to(torch.bfloat16)
    ref = copy.deepcopy(ours).float()
    runner = bench.Runner("ssmscan", ours)
    with torch.inference_mode():
        gated, reported = bench.gate("tiny", [runner], ref, 37, 3, torch.bfloat16)
    assert set(gated) == {"ssmscan layers prefill", "ssmscan layers cached prefill",
                          "ssmscan layers decode"}  # fmt: skip
    assert max(gated.values()) <= tolerance(torch.bfloat16)
    assert "ssmscan logits decode" in reported
    with torch.no_grad():
        ours.layers[1].mixer.out_proj.weight.mul_(1.1)
    with torch.inference_mode(), pytest.raises(bench.GateError, match="ssmscan layers prefill"):
        bench.gate("tiny", [runner], ref, 37, 3, torch.bfloat16)


def _run(args: list[str], out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH), *args, "--out", str(out)], capture_output=True, text=True,
        timeout=600, env={**os.environ, "TRITON_INTERPRET": "1"},
    )  # fmt: skip


def test_cpu_smoke_run_times_ssmscan_alone_without_mamba_ssm(tmp_path):
    out = tmp_path / "r.json"
    run = _run([*SMOKE, "--mamba-src", str(tmp_path / "absent"), "--seq-len", "16",
                "--prefill-batches", "2", "--decode-batches", "2", "--decode-steps", "3",
                "--reps", "1"], out)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "timing ssmscan alone" in run.stdout
    result = json.loads(out.read_text())
    assert result["environment"]["mamba_ssm"]["error"].startswith("no mamba_ssm package")
    rows = {(r["model"], r["library"], r["row"]) for r in result["rows"] if "tokens_per_s" in r}
    assert rows == {(m, "ssmscan", row) for m in ("mamba2-tiny", "mamba1-tiny")
                    for row in ("prefill", "decode")}  # fmt: skip
    assert set(result["gates"]) == {"mamba2-tiny", "mamba1-tiny"}


@pytest.mark.slow  # mamba-ssm's Triton kernels under the interpreter: ~20 s
def test_mamba_ssm_with_our_weights_is_the_same_model(tmp_path):
    """float32 on CPU: both libraries' whole-model logits (prefill, cached prefill, decode) within
    the float32 tolerance of each other, and the gate passes for both."""
    if not (MAMBA_SSM_SRC / "mamba_ssm" / "models" / "mixer_seq_simple.py").is_file():
        pytest.skip(f"mamba-ssm's source not found at {MAMBA_SSM_SRC} (set MAMBA_SSM_SRC)")
    pytest.importorskip("einops", reason="mamba-ssm's modules import einops")
    out = tmp_path / "r.json"
    run = _run([*SMOKE, "--dtype", "fp32", "--check-only", "--mamba-src", str(MAMBA_SSM_SRC)], out)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    gates = json.loads(out.read_text())["gates"]
    for model in ("mamba2-tiny", "mamba1-tiny"):
        reported = gates[model]["reported"]
        assert reported["logits ssmscan~mamba-ssm"] <= tolerance(torch.float32), reported
        assert reported["mamba-ssm logits decode"] <= tolerance(torch.float32), reported
        assert "mamba-ssm layers decode" in gates[model]["gated"]
