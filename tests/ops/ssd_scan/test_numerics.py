"""ssd_scan's CPU kernel against the float64 sequential reference: outputs, final states and the
gradient of every tensor argument, at chunk boundaries and odd lengths."""

from __future__ import annotations

import itertools

import pytest
import torch

import ssmscan
from ssmscan.ops.ssd_scan.reference import ssd_scan_chunked_reference, ssd_scan_reference
from ssmscan.testing import assert_close_to_reference

# name -> (factory options, ssd_scan options)
CONFIGS = {
    "plain": (dict(ngroups=1, D_shape=None), {}),
    "full": (
        dict(D_shape="channel", z=True, dt_bias=True, dt_softplus=True, initial_states=True),
        {},
    ),
    "Dhead-limit": (
        dict(ngroups=1, D_shape="head", dt_bias=True, dt_softplus=True),
        {"dt_limit": (0.005, 0.08)},
    ),
    "packed": (
        dict(D_shape="head", z=True, dt_softplus=True, initial_states=True, seq_idx=True),
        {},
    ),
}


def _leaves(kw, dtype=None):
    out = {}
    for k, v in kw.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            v = v.detach().clone() if dtype is None else v.detach().to(dtype)
            out[k] = v.requires_grad_()
        else:
            out[k] = v
    return out


def _run(fn, kw, gy=None, gf=None, **options):
    """(out, final, {name: grad}) of sum(out * gy) + sum(final * gf)."""
    out, final = fn(**kw, return_final_states=True, **options)
    g = torch.Generator().manual_seed(7)
    gy = torch.randn(out.shape, generator=g, dtype=torch.float64) if gy is None else gy
    gf = torch.randn(final.shape, generator=g, dtype=torch.float64) if gf is None else gf
    torch.autograd.backward([out, final], [gy.to(out.dtype), gf.to(final.dtype)])
    grads = {k: v.grad for k, v in kw.items() if isinstance(v, torch.Tensor) and v.requires_grad}
    return out.detach(), final.detach(), grads, gy, gf


def _compare(kw, dtype, chunk_size=None, **options):
    ref_out, ref_final, ref_grads, gy, gf = _run(
        ssd_scan_reference, _leaves(kw, torch.float64), **options
    )
    out, final, grads, _, _ = _run(
        ssmscan.ssd_scan, _leaves(kw), gy, gf, chunk_size=chunk_size, **options
    )
    assert out.dtype == kw["x"].dtype
    assert final.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert_close_to_reference("out", out, ref_out, dtype)
    assert_close_to_reference("final_states", final, ref_final, dtype)
    assert set(grads) == set(ref_grads) and len(grads) >= 5
    for k in ref_grads:
        assert grads[k].dtype == kw[k].dtype and grads[k].shape == kw[k].shape, k
        assert_close_to_reference(f"grad {k}", grads[k], ref_grads[k], dtype)


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("L", [1, 63, 64, 65, 300], ids=lambda L: f"L{L}")
def test_fp32_against_float64_reference(L, config, ssd_inputs):
    factory, options = CONFIGS[config]
    kw = ssd_inputs(L=L, seed=L, **factory)
    _compare(kw, torch.float32, chunk_size=64, **options)


@pytest.mark.parametrize("config", ["full", "packed"])
@pytest.mark.parametrize("L", [63, 300], ids=lambda L: f"L{L}")
def test_bf16_against_float64_reference(L, config, ssd_inputs):
    factory, options = CONFIGS[config]
    kw = ssd_inputs(L=L, seed=L, dtype=torch.bfloat16, **factory)
    _compare(kw, torch.bfloat16, **options)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64], ids=["fp16", "fp64"])
def test_fp16_fp64_against_float64_reference(dtype, ssd_inputs):
    kw = ssd_inputs(L=65, seed=1, dtype=dtype, **CONFIGS["full"][0])
    _compare(kw, dtype, chunk_size=16)


def test_parameters_in_the_dtype_of_x(ssd_inputs):
    """A, D, dt_bias and initial_states in bf16 beside bf16 x (a model cast to bf16)."""
    kw = ssd_inputs(L=40, dtype=torch.bfloat16, **CONFIGS["full"][0])
    for k in ("A", "D", "dt_bias", "initial_states"):
        kw[k] = kw[k].to(torch.bfloat16)
    _compare(kw, torch.bfloat16)


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 512])
def test_chunk_size_changes_nothing_but_rounding(chunk_size, ssd_inputs):
    kw = ssd_inputs(L=100, seed=3, **CONFIGS["packed"][0])
    _compare(kw, torch.float32, chunk_size=chunk_size)


def test_packed_sequences_equal_separate_runs(ssd_inputs):
    """seq_idx: each packed sequence equals its own run; sequence 0 of a row starts from the
    initial state, the others (and every sequence of a row whose first id is not 0) from zero."""
    kw = ssd_inputs(L=90, seed=5, **CONFIGS["packed"][0])
    seq = kw["seq_idx"]
    out, final = ssmscan.ssd_scan(**kw, return_final_states=True, chunk_size=16)
    for b in range(seq.shape[0]):
        ids = seq[b].tolist()
        starts = [t for t in range(len(ids)) if t == 0 or ids[t] != ids[t - 1]] + [len(ids)]
        assert len(starts) >= 3  # at least two sequences in the row
        for s, e in itertools.pairwise(starts):
            part = {
                k: (v[b : b + 1, s:e] if k in ("x", "dt", "B", "C", "z") else v)
                for k, v in kw.items()
                if k != "seq_idx"
            }
            h0 = kw["initial_states"][b : b + 1]
            part["initial_states"] = h0 if ids[s] == 0 and s == 0 else torch.zeros_like(h0)
            o, f = ssd_scan_reference(**part, return_final_states=True)
            assert_close_to_reference(f"row {b} [{s}:{e}]", out[b : b + 1, s:e], o, torch.float32)
        assert_close_to_reference(f"final row {b}", final[b : b + 1], f, torch.float32)


@pytest.mark.parametrize("chunk_size", [1, 5, 32])
def test_chunked_reference_equals_sequential_reference(chunk_size, ssd_inputs):
    kw = ssd_inputs(L=70, seed=9, dtype=torch.float64, **CONFIGS["packed"][0])
    out, final = ssd_scan_chunked_reference(**kw, chunk_size=chunk_size)
    ref_out, ref_final = ssd_scan_reference(**kw, return_final_states=True)
    assert_close_to_reference("out", out, ref_out, torch.float64)
    assert_close_to_reference("final_states", final, ref_final, torch.float64)


@pytest.mark.slow
@pytest.mark.parametrize("L", [1000], ids=lambda L: f"L{L}")
def test_long_fp32_against_float64_reference(L, ssd_inputs):
    kw = ssd_inputs(L=L, nheads=8, headdim=16, ngroups=2, dstate=32, seed=L,
                         **CONFIGS["packed"][0])  # fmt: skip
    _compare(kw, torch.float32)


def test_strided_inputs_as_split_from_one_projection(ssd_inputs):
    """x, z, B, C, dt as slices of one (batch, L, width) projection, as Mamba-2 splits its
    in_proj output: strided views, not contiguous tensors."""
    kw = ssd_inputs(L=45, z=True, dt_bias=True, dt_softplus=True, initial_states=True)
    b, L, H, P = kw["x"].shape
    G, N = kw["B"].shape[2:]
    parts = [kw["z"].reshape(b, L, -1), kw["x"].reshape(b, L, -1), kw["B"].reshape(b, L, -1),
             kw["C"].reshape(b, L, -1), kw["dt"]]  # fmt: skip
    proj = torch.cat(parts, dim=-1)
    z, x, B, C, dt = torch.split(proj, [t.shape[-1] for t in parts], dim=-1)
    strided = dict(kw, z=z.view(b, L, H, P), x=x.view(b, L, H, P), B=B.view(b, L, G, N),
                   C=C.view(b, L, G, N), dt=dt)  # fmt: skip
    assert not strided["x"].is_contiguous()
    out, final = ssmscan.ssd_scan(**strided, return_final_states=True)
    ref, ref_final = ssd_scan_reference(
        **{k: (v.double() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()},
        return_final_states=True,
    )
    assert_close_to_reference("out", out, ref, torch.float32)
    assert_close_to_reference("final_states", final, ref_final, torch.float32)


def test_chunked_reference_exports_as_aten(ssd_inputs):
    """The chunked reference is pure aten without value-dependent control flow: it exports
    (static length) to a graph of aten ops alone, packed sequences included, with the
    reference's results."""

    class Chunked(torch.nn.Module):
        def forward(self, x, dt, A, B, C, seq_idx):
            return ssd_scan_chunked_reference(x, dt, A, B, C, 16, seq_idx=seq_idx)

    kw = ssd_inputs(L=40, seq_idx=True, D_shape=None)
    args = tuple(kw[k] for k in ("x", "dt", "A", "B", "C", "seq_idx"))
    ep = torch.export.export(Chunked(), args)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert all(t.startswith("aten.") or t == "<built-in function getitem>" for t in targets)
    out, final = ep.module()(*args)
    ref, ref_final = ssd_scan_reference(**kw, return_final_states=True)
    assert_close_to_reference("out", out, ref, torch.float32)
    assert_close_to_reference("final_states", final, ref_final, torch.float32)


@pytest.mark.parametrize("packed", [False, True], ids=["single", "packed"])
@pytest.mark.parametrize("chunk_size", [64, 128], ids=lambda q: f"Q{q}")
def test_strong_decays_fp32_against_float64_reference(chunk_size, packed, ssd_inputs):
    """Time steps of several units and A down to -24 (as a randomly initialized 130m model has):
    the log-decays summed within a chunk reach thousands, where a float32 difference of two such
    sums loses every digit of a decay near 1; the kernel must keep them exact."""
    kw = ssd_inputs(L=300, nheads=4, headdim=8, ngroups=2, dstate=16, D_shape="head",
                    dt_bias=True, initial_states=True, seq_idx=packed)  # fmt: skip
    g = torch.Generator().manual_seed(3)
    kw["dt"] = (torch.rand(kw["dt"].shape, generator=g) * 4).to(kw["dt"].dtype)
    kw["A"] = -(1 + 23 * torch.rand(kw["A"].shape, generator=g)).to(kw["A"].dtype)
    _compare(kw, torch.float32, chunk_size=chunk_size)
