"""The SSD GPU benchmark's correctness gate runs on any machine (the launchers under Triton's
interpreter at a tiny shape): a broken benchmark must fail here, not in a lent GPU's call."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("triton")

BENCH = pathlib.Path(__file__).parents[3] / "benchmarks" / "ssd_scan" / "bench_gpu.py"


def _load_bench():
    """The benchmark script as a module (it is not importable by name)."""
    from ssmscan.testing.scripts import load_script

    return load_script(BENCH, "ssd_bench_gpu")


@pytest.mark.triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="runs the launchers under TRITON_INTERPRET=1 (set without a GPU)")  # fmt: skip
@pytest.mark.parametrize("problem", ["full", "core"])
def test_check_only_on_cpu(problem):
    res = subprocess.run(
        [sys.executable, str(BENCH), "--device", "cpu", "--check-only", "--parts", "scan",
         "--problems", problem, "--shapes", "1,37,2,16,1,16"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"},
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert f'"problem": "{problem}", "variant": "ssmscan"' in res.stdout
    assert '"ok": true' in res.stdout and '"ok": false' not in res.stdout


@pytest.mark.triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="runs the launchers under TRITON_INTERPRET=1 (set without a GPU)")  # fmt: skip
def test_plan_variants_are_checked_too():
    """``--plans``: ours by a changed plan (here C·Bᵀ per head and one head a program in the dB /
    dC kernel) runs through the same gate; an unknown plan field is refused by name."""
    res = subprocess.run(
        [sys.executable, str(BENCH), "--device", "cpu", "--check-only", "--parts", "scan",
         "--problems", "full", "--shapes", "1,37,2,16,1,16",
         "--plans", "other=cb_once:false,dbc_heads:1"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"},
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert '"variant": "ssmscan[other]"' in res.stdout
    assert '"ok": true' in res.stdout and '"ok": false' not in res.stdout
    bad = subprocess.run(
        [sys.executable, str(BENCH), "--device", "cpu", "--check-only", "--plans", "x=blockp:16"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"},
    )  # fmt: skip
    assert bad.returncode != 0 and "'blockp' is not an SSDPlan field" in bad.stderr, bad.stderr


@pytest.mark.triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="runs the decode kernel under TRITON_INTERPRET=1 (set without a GPU)")  # fmt: skip
@pytest.mark.parametrize("layout", ["mamba2", "mamba1"])
def test_decode_pieces_on_cpu(layout, monkeypatch):
    """The decode part's inputs and float64 reference in both layouts agree with ssmscan's step,
    and its channel-block variants (``--decode-block-p``) run the kernel by that plan."""
    import torch

    bench = _load_bench()
    monkeypatch.setattr(bench, "DECODE_HEADS", (3, 8, 16))
    monkeypatch.setattr(bench, "DECODE_MAMBA1", (40, 16))
    kw = bench.decode_inputs(2, torch.float32, "cpu", seed=1, layout=layout)
    assert kw["state"].dim() == (3 if layout == "mamba1" else 4)
    r_out, r_state = bench.decode_reference(kw)
    variants = bench.decode_variants("/nonexistent", (8,))
    assert set(variants) == {"ssmscan", "ssmscan[p8]", "mamba-ssm"}
    for name in ("ssmscan", "ssmscan[p8]"):
        state = kw["state"].clone()
        out = variants[name][0](**{**kw, "state": state}, dt_softplus=True)
        assert bench._rel(out, r_out) < 1e-6 and bench._rel(state, r_state) < 1e-6, name


def test_anchor_autotuning_redone_at_the_timed_shape(monkeypatch):
    """``retune_at`` empties the autotuning caches of an anchor's modules (a kernel under
    ``triton.heuristics`` too) and leaves other packages' alone, then runs the anchor forward
    and backward once at the given inputs (its backward's refusal is the gate's to report)."""
    import types

    import torch
    import triton
    import triton.language as tl

    bench = _load_bench()

    @triton.jit
    def kernel(x, N: tl.constexpr):
        pass

    def tuned():
        return triton.autotune(configs=[triton.Config({})], key=["N"])(kernel)

    anchor = types.ModuleType("mamba_ssm.fake_ssd")
    anchor.plain = tuned()
    anchor.wrapped = triton.heuristics({"N": lambda args: 1})(tuned())
    other = types.ModuleType("other_pkg.kernels")
    other.kept = tuned()
    for t in (anchor.plain, anchor.wrapped.fn, other.kept):
        t.cache[(16,)] = triton.Config({})
    monkeypatch.setitem(sys.modules, "mamba_ssm.fake_ssd", anchor)
    monkeypatch.setitem(sys.modules, "other_pkg.kernels", other)
    calls = []

    def fn(kw, full):
        calls.append(full)
        return kw["x"] * 2.0, None

    x = torch.randn(3, 4)
    bench.retune_at(fn, {"x": x}, True)
    assert anchor.plain.cache == {} and anchor.wrapped.fn.cache == {}
    assert other.kept.cache  # not an anchor's
    assert calls == [True]

    def refusing(kw, full):  # a backward that raises (flash-linear-attention on this Triton)
        class Refuse(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t):
                return t * 1.0

            @staticmethod
            def backward(ctx, g):
                raise RuntimeError("refused")

        return Refuse.apply(kw["x"]), None

    bench.retune_at(refusing, {"x": x}, False)


@pytest.mark.triton
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="runs the launchers under TRITON_INTERPRET=1 (set without a GPU)")  # fmt: skip
def test_timing_rounds_interleave_the_variants(monkeypatch, capsys):
    """After every variant of a shape passed the gate, the timing runs ``--rounds`` rounds over
    them in turn (forward, then forward+backward, per variant); a row carries its rounds' median
    and spread. The device's timer and ceilings are faked here: only the order and the
    bookkeeping are checked."""
    import json

    import torch

    bench = _load_bench()
    calls = []
    ticks = iter(range(1, 100))

    def fake_time(fn, kw, full, backward):
        calls.append((fn, backward))
        return float(next(ticks))

    monkeypatch.setattr(bench, "time_variant", fake_time)
    monkeypatch.setattr(bench, "ceilings", lambda dtype: (3e12, 7e14))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake")
    monkeypatch.setattr(sys, "argv", [
        str(BENCH), "--device", "cpu", "--parts", "scan", "--problems", "full", "--anchors",
        "--shapes", "1,37,2,16,1,16", "--plans", "other=cb_once:false", "--rounds", "3"])  # fmt: skip
    bench.main()
    fns = [fn for fn, _ in calls]
    assert len(calls) == 12 and [b for _, b in calls] == [False, True] * 6
    assert fns[0] is not fns[2] and fns[0:4] == fns[4:8] == fns[8:12]  # in turn, each round
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()
            if line.startswith("{")]  # fmt: skip
    assert [r["variant"] for r in rows] == ["ssmscan", "ssmscan[other]"]
    # ssmscan's forward took 1, 5, 9 and its forward+backward 2, 6, 10 (the fake's ticks)
    assert (rows[0]["fwd_ms"], rows[0]["fwd_spread"]) == (5.0, 8 / 5)
    assert (rows[1]["fwdbwd_ms"], rows[1]["fwdbwd_spread"]) == (8.0, 8 / 8)


def test_decode_graph_timing_reports_what_cannot_be_captured(monkeypatch):
    """``_graph_us`` gives ``do_bench_cudagraph``'s median in µs, or (None, the error) where the
    step cannot be captured, without failing the row."""
    import triton.testing

    bench = _load_bench()
    calls = []

    def timed(fn, return_mode="mean"):
        calls.append(return_mode)
        fn()
        return 0.0125

    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", timed)
    ran = []
    assert bench._graph_us(lambda: ran.append(1)) == (12.5, None)
    assert ran == [1] and calls == ["median"]

    def refused(fn, return_mode="mean"):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", refused)
    monkeypatch.setattr(bench.torch.cuda, "synchronize", lambda: None)
    us, error = bench._graph_us(lambda: None)
    assert us is None and error.startswith("RuntimeError: operation not permitted")
