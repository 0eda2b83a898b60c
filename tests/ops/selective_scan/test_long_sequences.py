"""Past 2^20 steps (Note [long sums] in ``ops/selective_scan/shapes.py``): outputs, final state,
checkpoints and every gradient against float64.

The sequential reference is out of reach at this length (a Python step per token), so the float64
oracle here is the C kernel run in float64 (``selective_scan_fwd_cpu`` / ``_bwd_cpu``), which the
op tests check against that reference to 1e-12 on their grid. What a long L can break, and short
tests cannot see: fp32 sums over every step (dA, dD, ddelta_bias) losing accuracy, and offsets
past int32.
"""

from __future__ import annotations

import functools
import os
import sys

import pytest
import torch

from ssmscan.ops.selective_scan import cpu
from ssmscan.ops.selective_scan.shapes import state_dtype
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs

# the op's tensor inputs, in order: also the backward's gradients (every one present here)
_ARGS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")
L_ODD = (1 << 20) + 37  # past 2^20, odd: not a multiple of a tile
L_16 = (1 << 20) + 48  # past 2^20, a multiple of 16 (the split / lane backward's)
_DEVICE = "cuda"  # the GPU test's (a module constant: a tiny run of it under the interpreter)


@functools.lru_cache(maxsize=2)
def _case(dim: int, L: int, groups: int | None, dtype: torch.dtype):
    """CPU inputs (every optional input, softplus, an initial state), dout and dlast."""
    kw = make_selective_scan_inputs(
        1, dim, L, 16, groups=groups, dtype=dtype, has_initial_state=True, seed=L % 1000
    )
    g = torch.Generator().manual_seed(7)
    dout = torch.randn(1, dim, L, generator=g, dtype=torch.float64).to(dtype)
    dlast = torch.randn(1, dim, 16, generator=g)
    return kw, dout, dlast


def _c_kernel(kw, dout, dlast, dtype):
    """(out, last_state, checkpoints, {name: gradient}) from the C kernel computing in ``dtype``'s
    state dtype (inputs cast to ``dtype`` first)."""
    a = [kw[k].to(dtype) if kw[k] is not None else None for k in _ARGS]
    out, last, ckpt = cpu.selective_scan_fwd_cpu(*a, kw["delta_softplus"])
    du, ddelta, dA, dB, dC, rest = cpu.selective_scan_bwd_cpu(
        dout.to(dtype), dlast.to(state_dtype(dtype)),
        *a, ckpt, kw["delta_softplus"],
    )  # fmt: skip
    return out, last, ckpt, dict(zip(_ARGS, [du, ddelta, dA, dB, dC, *rest]))


@functools.lru_cache(maxsize=2)
def _oracle(dim: int, L: int, groups: int | None, dtype: torch.dtype):
    kw, dout, dlast = _case(dim, L, groups, dtype)
    return _c_kernel(kw, dout, dlast, torch.float64)


def _check(got, ref, dtype, where: str):
    out, last, ckpt, grads = got
    r_out, r_last, r_ckpt, r_grads = ref
    assert_close_to_reference(f"{where}: out", out, r_out, dtype)
    assert_close_to_reference(f"{where}: last_state", last, r_last, dtype)
    assert_close_to_reference(f"{where}: checkpoints", ckpt, r_ckpt, dtype)
    assert set(grads) == set(r_grads)
    for k, g in grads.items():
        assert_close_to_reference(f"{where}: d{k}", g, r_grads[k], dtype)


@pytest.mark.slow
def test_cpu_long_sequence_fp32():
    """The C kernel in fp32 at 2^20 + 37 steps. Before the two-level sums dA was 2.3e-5 and dD
    2.1e-5 off float64, above the fp32 tolerance (1e-5)."""
    kw, dout, dlast = _case(4, L_ODD, None, torch.float32)
    got = _c_kernel(kw, dout, dlast, torch.float32)
    _check(got, _oracle(4, L_ODD, None, torch.float32), torch.float32, "cpu fp32")


def _triton_tests():
    """The Triton tests' module (its launch helper), imported from this folder."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import test_selective_scan_triton

    return test_selective_scan_triton


def _spy_kernels(monkeypatch) -> set[str]:
    """The names of the kernels the selective-scan launchers start, collected from now on."""
    from ssmscan.ops.selective_scan import triton_bwd_launch, triton_fwd

    seen: set[str] = set()
    for mod in (triton_fwd, triton_bwd_launch):
        real = mod.launcher

        def spy(kernel, *a, _real=real):
            seen.add(kernel.__name__)
            return _real(kernel, *a)

        monkeypatch.setattr(mod, "launcher", spy)
    return seen


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "L,variant,main",
    [
        pytest.param(L_ODD, "lane", "_selective_scan_bwd_tile_kernel", id="odd-L-tile"),
        pytest.param(L_16, "lane", "_selective_scan_bwd_lane_kernel", id="lane"),
        pytest.param(L_16, "split", "_selective_scan_bwd_split_kernel", id="split"),
    ],
)
def test_triton_gpu_long_sequence(L, variant, main, monkeypatch):
    """Every Triton backward main kernel at 2^20 + a few steps, fp32, batch 1, 32 channels in two
    groups of B / C: L split into segments (the default at this size) and kept in one segment
    (one program walks all 2^20 steps: the longest sums)."""
    import warnings

    from ssmscan.ops.selective_scan import triton_bwd
    from ssmscan.ops.selective_scan.plan import Policy

    T = _triton_tests()
    dtype = torch.float32
    kw, dout, dlast = _case(32, L, 2, dtype)
    ref = _oracle(32, L, 2, dtype)
    kw_gpu = {k: (v.to(_DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    for segmenting in ("segments", "one-segment"):
        policy = Policy() if segmenting == "segments" else Policy(split_below_warps=0)
        args = [kw_gpu[k] for k in T._ARGS]
        plan = triton_bwd.plan_for(args[0], args[2], args[3], args, policy)
        if variant == "split":  # the lane plan's fallback
            plan = plan.fallback
        with monkeypatch.context() as m, warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # no layout-check fallback
            seen = _spy_kernels(m)
            (out, last, ckpt), grads = T._run_launchers(
                kw_gpu, dout.to(_DEVICE), dlast.to(_DEVICE), policy, bwd_plan=plan
            )
        assert main in seen, (segmenting, sorted(seen))
        got = (out, last, ckpt, {k: grads[k] for k in ref[3]})
        _check(got, ref, dtype, f"{variant} {segmenting}")
