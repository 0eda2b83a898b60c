"""ssmscan.integrations.mamba_ssm: mamba-ssm's names and signatures on ssmscan ops.

Every function is checked twice: against ssmscan's float64 references (always), and against
mamba-ssm's own pure-PyTorch references (``selective_scan_ref``, ``ssd_minimal_discrete``,
``ssd_chunk_scan_combined_ref``, ``ssd_selective_scan``, ``selective_state_update_ref``) when
mamba-ssm's source is present: ``$MAMBA_SSM_SRC`` or /tmp/mb/mamba_ssm-2.3.2.post1 (an unpacked
sdist or a checkout). The references are read from the source with ``ast`` and run with torch and
einops only, so neither mamba-ssm's CUDA extension nor its package is imported.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ssmscan
from ssmscan.integrations import mamba_ssm as mm
from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.ops.selective_state_update.reference import selective_state_update_reference
from ssmscan.ops.ssd_scan.reference import ssd_scan_reference
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs

F64 = torch.float64
MAMBA_SSM_SRC = Path(os.environ.get("MAMBA_SSM_SRC", "/tmp/mb/mamba_ssm-2.3.2.post1"))
RUNNER = Path(__file__).resolve().parents[2] / "benchmarks/integrations/run_mamba_ssm_tests.py"

# mamba-ssm 2.3.2's signatures, as its source spells them (checked against the source below
# when it is present)
SIGNATURES = {
    "selective_scan_fn": (
        "ops/selective_scan_interface.py",
        "(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, "
        "return_last_state=False)",
    ),
    "mamba_chunk_scan_combined": (
        "ops/triton/ssd_combined.py",
        "(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None, "
        "seq_idx=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, inf), "
        "return_final_states=False, return_varlen_states=False)",
    ),
    "selective_state_update": (
        "ops/triton/selective_state_update.py",
        "(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, "
        "state_batch_indices=None)",
    ),
}

# mamba-ssm's pure-PyTorch references: file under mamba_ssm/ -> functions taken from it
REFERENCES = {
    "ops/selective_scan_interface.py": ("selective_scan_ref",),
    "ops/triton/selective_state_update.py": ("selective_state_update_ref",),
    "modules/ssd_minimal.py": ("segsum", "ssd_minimal_discrete"),
    "ops/triton/ssd_chunk_state.py": ("chunk_state_ref",),
    "ops/triton/ssd_state_passing.py": ("state_passing_ref",),
    "ops/triton/ssd_chunk_scan.py": ("chunk_scan_ref",),
    "ops/triton/ssd_combined.py": ("ssd_chunk_scan_combined_ref", "ssd_selective_scan"),
}


def _render(params: list[tuple[str, Any]]) -> str:
    """'(a, b=None, ...)' from (name, default or inspect.Parameter.empty) pairs."""
    parts = [n if d is inspect.Parameter.empty else f"{n}={d!r}" for n, d in params]
    return "(" + ", ".join(parts) + ")"


def _our_signature(fn) -> str:
    params = inspect.signature(fn).parameters.values()
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params), fn
    return _render([(p.name, p.default) for p in params])


def _source_signature(path: Path, name: str) -> str:
    (node,) = [
        n for n in ast.parse(path.read_text()).body
        if isinstance(n, ast.FunctionDef) and n.name == name
    ]  # fmt: skip
    a = node.args
    assert not (a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs), name
    defaults = [inspect.Parameter.empty] * (len(a.args) - len(a.defaults)) + [
        eval(ast.unparse(d), {"float": float}) for d in a.defaults
    ]
    return _render([(arg.arg, d) for arg, d in zip(a.args, defaults, strict=True)])


def _load_references() -> tuple[dict[str, Any] | None, str]:
    """mamba-ssm's reference functions, exec'd from its source into one namespace."""
    if not (MAMBA_SSM_SRC / "mamba_ssm").is_dir():
        return None, f"mamba-ssm's source not found at {MAMBA_SSM_SRC} (set MAMBA_SSM_SRC)"
    try:
        import einops
    except ImportError:
        return None, "mamba-ssm's references need einops, which is not installed"
    ns: dict[str, Any] = dict(
        torch=torch, F=F, math=math, rearrange=einops.rearrange, repeat=einops.repeat
    )
    for rel, names in REFERENCES.items():
        path = MAMBA_SSM_SRC / "mamba_ssm" / rel
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name in names:
                # ssd_selective_scan imports selective_scan_fn in its body: it gets the reference
                node.body = [s for s in node.body if not isinstance(s, ast.ImportFrom)]
                module = ast.Module(body=[node], type_ignores=[])
                exec(compile(module, str(path), "exec"), ns)
    ns["selective_scan_fn"] = ns["selective_scan_ref"]
    return ns, ""


@pytest.fixture(scope="module")
def ref():
    ns, reason = _load_references()
    if ns is None:
        pytest.skip(reason)
    return ns


def _leaves(kw: dict[str, Any], dtype: torch.dtype | None = None) -> dict[str, Any]:
    """Fresh leaves requiring grad for every float tensor (cast to ``dtype`` when given)."""
    out = {}
    for k, v in kw.items():
        if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex()):
            v = v.detach().clone() if dtype is None else v.detach().to(dtype)
            v.requires_grad_()
        out[k] = v
    return out


def _grads(kw: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {
        k: v.grad for k, v in kw.items() if isinstance(v, torch.Tensor) and v.requires_grad
    }  # fmt: skip


def _cotangent(shape, seed=7):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


# ----------------------------------------------------------------------------- signatures


@pytest.mark.parametrize("name", list(SIGNATURES))
def test_signature_is_mamba_ssms(name):
    assert _our_signature(getattr(mm, name)) == SIGNATURES[name][1]


@pytest.mark.parametrize("name", list(SIGNATURES))
def test_signature_matches_mamba_ssm_source(name):
    path = MAMBA_SSM_SRC / "mamba_ssm" / SIGNATURES[name][0]
    if not path.is_file():
        pytest.skip(f"mamba-ssm's source not found at {MAMBA_SSM_SRC} (set MAMBA_SSM_SRC)")
    assert _our_signature(getattr(mm, name)) == _source_signature(path, name)


def test_selective_state_update_is_ssmscans():
    assert mm.selective_state_update is ssmscan.selective_state_update


# -------------------------------------------------------------------------- selective_scan_fn

SCAN_OPTIONS = {
    "plain": dict(has_D=False, has_z=False, has_delta_bias=False, delta_softplus=False),
    "full": dict(),  # D, z, delta_bias, softplus
    "G2": dict(groups=2),
}
SCAN_CASES = [
    pytest.param(L, dtype, opt, id=f"B2-L{L}-D4-N8-{str(dtype)[6:]}-{opt}")
    for L, dtype, opt in [
        (1, torch.float32, "full"),
        (63, torch.float32, "plain"),
        (63, torch.float32, "full"),
        (63, torch.float32, "G2"),
        (63, torch.bfloat16, "full"),
    ]
]


def _scan_inputs(L, dtype, opt):
    kw = make_selective_scan_inputs(2, 4, L, 8, dtype=dtype, seed=L, **SCAN_OPTIONS[opt])
    del kw["initial_state"]
    return kw


@pytest.mark.parametrize(("L", "dtype", "opt"), SCAN_CASES)
def test_selective_scan_fn_matches_float64_reference(L, dtype, opt):
    kw = _scan_inputs(L, dtype, opt)
    ours = _leaves(kw)
    out, last = mm.selective_scan_fn(**ours, return_last_state=True)
    ref_kw = _leaves(kw, F64)
    ref_out, ref_last = selective_scan_reference(
        **ref_kw, return_last_state=True, compute_dtype=F64
    )
    assert out.dtype == dtype and last.dtype == torch.float32
    assert_close_to_reference("out", out, ref_out, dtype)
    assert_close_to_reference("last_state", last, ref_last, dtype)
    gy, gl = _cotangent(out.shape), _cotangent(last.shape, 8)
    torch.autograd.backward([out, last], [gy.to(out.dtype), gl.to(last.dtype)])
    torch.autograd.backward([ref_out, ref_last], [gy, gl])
    ref_grads = _grads(ref_kw)
    for name, g in _grads(ours).items():
        assert_close_to_reference(f"d{name}", g, ref_grads[name], dtype)


def test_selective_scan_fn_return_forms():
    kw = _scan_inputs(5, torch.float32, "plain")
    out = mm.selective_scan_fn(**kw)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 4, 5)
    pair = mm.selective_scan_fn(**kw, return_last_state=True)
    assert isinstance(pair, tuple) and len(pair) == 2 and pair[1].shape == (2, 4, 8)
    torch.testing.assert_close(pair[0], out, rtol=0, atol=0)


@pytest.mark.parametrize(("L", "dtype", "opt"), SCAN_CASES)
def test_selective_scan_fn_matches_mamba_ssm_ref(ref, L, dtype, opt):
    kw = _scan_inputs(L, dtype, opt)
    ours, theirs = _leaves(kw), _leaves(kw)
    out, last = mm.selective_scan_fn(**ours, return_last_state=True)
    ref_out, ref_last = ref["selective_scan_ref"](**theirs, return_last_state=True)
    assert ref_out.dtype == out.dtype and ref_last.dtype == last.dtype
    assert_close_to_reference("out", out, ref_out, dtype)
    assert_close_to_reference("last_state", last, ref_last, dtype)
    if dtype != torch.float32:
        return  # gradients in bf16: checked against float64 above
    gy = _cotangent(out.shape).to(out.dtype)
    out.backward(gy)
    ref_out.backward(gy)
    ref_grads = _grads(theirs)
    for name, g in _grads(ours).items():
        assert_close_to_reference(f"d{name}", g, ref_grads[name], dtype)


def test_selective_scan_fn_complex_form_matches_mamba_ssm_ref(ref):
    """S4D-style: complex A, time-invariant complex B, variable real C of (real, imag) pairs."""
    g = torch.Generator().manual_seed(3)
    batch, dim, N, L = 2, 4, 6, 37
    A = torch.complex(-0.5 * torch.rand(dim, N, generator=g), torch.randn(dim, N, generator=g))
    B = torch.randn(dim, N, dtype=torch.complex64, generator=g)
    C = torch.randn(batch, N, 2 * L, generator=g)
    u, delta = torch.randn(batch, dim, L, generator=g), 0.5 * torch.rand(batch, dim, L, generator=g)
    D = torch.randn(dim, generator=g)
    out, last = mm.selective_scan_fn(u, delta, A, B, C, D, return_last_state=True)
    ref_out, ref_last = ref["selective_scan_ref"](u, delta, A, B, C, D, return_last_state=True)
    assert last.dtype == ref_last.dtype == torch.complex64
    assert_close_to_reference("out", out, ref_out, torch.float32)
    assert_close_to_reference(
        "last_state", torch.view_as_real(last), torch.view_as_real(ref_last), torch.float32
    )


# ------------------------------------------------------------------ mamba_chunk_scan_combined


def _ssd_inputs(batch, L, nheads=4, headdim=8, ngroups=2, dstate=16, dtype=torch.float32,
                full=False, seed=0):  # fmt: skip
    """Keyword arguments of mamba_chunk_scan_combined (no chunk_size, no options): Mamba-2's
    ranges (dt about 1e-3 to 0.1 after bias and softplus, A in [-16, -1]); with ``full`` D per
    channel, z, dt_bias, softplus and initial states."""
    g = torch.Generator().manual_seed(seed)
    p = torch.float64 if dtype == F64 else torch.float32

    def rnd(*shape, dt=dtype):
        return torch.randn(*shape, generator=g, dtype=F64).to(dt)

    kw: dict[str, Any] = dict(
        x=rnd(batch, L, nheads, headdim),
        A=-torch.exp(torch.rand(nheads, generator=g, dtype=F64) * math.log(16)).to(p),
        B=rnd(batch, L, ngroups, dstate),
        C=rnd(batch, L, ngroups, dstate),
    )
    if full:
        dt_target = torch.exp(
            torch.rand(nheads, generator=g, dtype=F64) * math.log(100) - math.log(1000)
        )
        kw["dt"] = (0.5 * rnd(batch, L, nheads, dt=F64)).to(dtype)
        kw["dt_bias"] = torch.log(torch.expm1(dt_target)).to(p)
        kw["D"] = rnd(nheads, headdim, dt=p)
        kw["z"] = rnd(batch, L, nheads, headdim)
        kw["initial_states"] = rnd(batch, nheads, headdim, dstate, dt=p)
        kw["dt_softplus"] = True
    else:
        kw["dt"] = (0.1 * torch.rand(batch, L, nheads, generator=g, dtype=F64)).to(dtype)
    return kw


SSD_CASES = [
    pytest.param(L, Q, dtype, full, id=f"B2-L{L}-H4-P8-G2-N16-Q{Q}-{str(dtype)[6:]}-{'full' if full else 'plain'}")
    for L, Q, dtype, full in [
        (1, 16, torch.float32, True),
        (63, 16, torch.float32, False),
        (65, 16, torch.float32, True),
        (63, 16, torch.bfloat16, True),
    ]
]  # fmt: skip


def _ssd_reference(kw, **options):
    return ssd_scan_reference(**kw, **options, return_final_states=True, compute_dtype=F64)


@pytest.mark.parametrize(("L", "Q", "dtype", "full"), SSD_CASES)
def test_mamba_chunk_scan_combined_matches_float64_reference(L, Q, dtype, full):
    kw = _ssd_inputs(2, L, dtype=dtype, full=full, seed=L)
    options = dict(dt_limit=(0.0, 0.05)) if full else {}
    ours, ref_kw = _leaves(kw), _leaves(kw, F64)
    out, final = mm.mamba_chunk_scan_combined(
        **ours, chunk_size=Q, **options, return_final_states=True
    )
    ref_out, ref_final = _ssd_reference(ref_kw, **options)
    assert out.dtype == dtype and final.dtype == torch.float32
    assert_close_to_reference("out", out, ref_out, dtype)
    assert_close_to_reference("final_states", final, ref_final, dtype)
    gy, gf = _cotangent(out.shape), _cotangent(final.shape, 8)
    torch.autograd.backward([out, final], [gy.to(out.dtype), gf.to(final.dtype)])
    torch.autograd.backward([ref_out, ref_final], [gy, gf])
    ref_grads = _grads(ref_kw)
    for name, g in _grads(ours).items():
        assert_close_to_reference(f"d{name}", g, ref_grads[name], dtype)


def _packed(L, cu, first_id=0):
    """cu_seqlens and the matching (1, L) seq_idx; tokens past cu[-1] continue the last id."""
    cu_seqlens = torch.tensor(cu, dtype=torch.int32)
    lengths = [b - a for a, b in itertools.pairwise(cu)] + [L - cu[-1]]
    ids = [first_id + min(i, len(cu) - 2) for i in range(len(lengths))]
    seq_idx = torch.cat(
        [torch.full((n,), i, dtype=torch.int32) for i, n in zip(ids, lengths, strict=True)]
    )
    return cu_seqlens, seq_idx[None]


VARLEN_CASES = [
    # a first sequence ending inside the first chunk (with initial states), a one-token sequence
    pytest.param(63, [0, 5, 21, 22, 63], 0, torch.float32, id="L63-Q16-seqs5,16,1,41-fp32"),
    pytest.param(63, [0, 5, 21, 22, 63], 0, torch.bfloat16, id="L63-Q16-seqs5,16,1,41-bf16"),
    # tokens after the last sequence; ids from 3, so no sequence sees the initial state
    pytest.param(63, [0, 40, 50], 3, torch.float32, id="L63-Q16-seqs40,10-tail13-ids3-fp32"),
    pytest.param(1, [0, 1], 0, torch.float32, id="L1-Q16-seqs1-fp32"),
]


@pytest.mark.parametrize(("L", "cu", "first_id", "dtype"), VARLEN_CASES)
def test_varlen_states_are_each_sequences_final_state(L, cu, first_id, dtype):
    kw = _ssd_inputs(1, L, dtype=dtype, full=True, seed=L + len(cu))
    cu_seqlens, seq_idx = _packed(L, cu, first_id)
    ours = _leaves(kw)
    out, final, varlen = mm.mamba_chunk_scan_combined(
        **ours, chunk_size=16, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
        return_final_states=True, return_varlen_states=True,
    )  # fmt: skip
    assert varlen.shape == (len(cu) - 1, 4, 8, 16) and varlen.dtype == torch.float32
    ref_kw = _leaves(kw, F64)
    ref_out, ref_final = _ssd_reference(ref_kw, seq_idx=seq_idx)
    assert_close_to_reference("out", out, ref_out, dtype)
    assert_close_to_reference("final_states", final, ref_final, dtype)
    # each sequence scanned alone; the first from initial_states when its id is 0
    h0 = ref_kw.pop("initial_states")
    ref_varlen = []
    for i, (a, b) in enumerate(itertools.pairwise(cu)):
        piece = {k: v[:, a:b] if k in ("x", "dt", "B", "C", "z") else v for k, v in ref_kw.items()}
        start = h0 if i == 0 and first_id == 0 else torch.zeros_like(h0)
        ref_varlen.append(_ssd_reference(piece, initial_states=start)[1][0])
    ref_varlen = torch.stack(ref_varlen)
    assert_close_to_reference("varlen_states", varlen, ref_varlen, dtype)
    # gradients flow through the varlen states too (mamba-ssm has no backward for them)
    gv = _cotangent(varlen.shape)
    varlen.backward(gv.float())
    ref_varlen.backward(gv)
    dh0 = h0.grad if h0.grad is not None else torch.zeros_like(h0)  # unseen: zero gradient
    ref_grads = _grads(ref_kw) | {"initial_states": dh0}
    for name in ("x", "dt", "B", "dt_bias", "initial_states"):
        assert_close_to_reference(f"d{name}", ours[name].grad, ref_grads[name], dtype)


def test_mamba_chunk_scan_combined_return_forms():
    kw = _ssd_inputs(1, 10, full=True)
    cu_seqlens, seq_idx = _packed(10, [0, 4, 10])
    out = mm.mamba_chunk_scan_combined(**kw, chunk_size=4)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 10, 4, 8)
    forms = {
        (True, False): ["out", "final"],
        (False, True): ["out", "varlen"],
        (True, True): ["out", "final", "varlen"],
    }
    shapes = {"out": (1, 10, 4, 8), "final": (1, 4, 8, 16), "varlen": (2, 4, 8, 16)}
    for (final, varlen), names in forms.items():
        res = mm.mamba_chunk_scan_combined(
            **kw, chunk_size=4, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
            return_final_states=final, return_varlen_states=varlen,
        )  # fmt: skip
        assert isinstance(res, tuple) and [tuple(t.shape) for t in res] == [
            shapes[n] for n in names
        ]
    # as in mamba-ssm, cu_seqlens is only read for the varlen states
    alone = mm.mamba_chunk_scan_combined(**kw, chunk_size=4, cu_seqlens=cu_seqlens)
    torch.testing.assert_close(alone, out, rtol=0, atol=0)


VARLEN_ERRORS = [
    pytest.param(dict(cu_seqlens=None), "cu_seqlens must be given", id="no-cu_seqlens"),
    pytest.param(dict(seq_idx=None), "needs seq_idx", id="no-seq_idx"),
    pytest.param(dict(batch=2), "batch 1", id="batch2"),
    pytest.param(dict(cu_seqlens=torch.tensor([0.0, 4.0, 10.0])), "int32/int64", id="cu-float"),
    pytest.param(dict(cu_seqlens=torch.tensor([1, 4, 10])), "start at 0", id="cu-start1"),
    pytest.param(dict(cu_seqlens=torch.tensor([0, 4, 4, 10])), "increase strictly", id="cu-empty-seq"),
    pytest.param(dict(cu_seqlens=torch.tensor([0, 4, 11])), "at most at L=10", id="cu-past-L"),
    pytest.param(dict(cu_seqlens=torch.tensor([0, 5, 10])), "seq_idx must change", id="seq_idx-elsewhere"),
    pytest.param(dict(cu_seqlens=torch.tensor([[0, 4, 10]])), "cu_seqlens must be 1-D", id="cu-2d"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "match"), VARLEN_ERRORS)
def test_varlen_states_errors_name_the_argument(change, match):
    batch = change.pop("batch", 1)
    kw = _ssd_inputs(batch, 10)
    cu_seqlens, seq_idx = _packed(10, [0, 4, 10])
    args = dict(seq_idx=seq_idx.expand(batch, -1), cu_seqlens=cu_seqlens) | change
    with pytest.raises(ValueError, match=match):
        mm.mamba_chunk_scan_combined(**kw, chunk_size=4, **args, return_varlen_states=True)


def test_mamba_chunk_scan_combined_bad_input_names_the_argument():
    kw = _ssd_inputs(1, 10)
    kw["D"] = torch.randn(3)
    with pytest.raises(ValueError, match="D must have shape"):
        mm.mamba_chunk_scan_combined(**kw, chunk_size=4)


@pytest.mark.parametrize(
    ("L", "block"), [pytest.param(63, 21, id="L63-Q21"), pytest.param(64, 16, id="L64-Q16")]
)
def test_mamba_chunk_scan_combined_matches_ssd_minimal_discrete(ref, L, block):
    """Against mamba-ssm's ``ssd_minimal_discrete`` run in float64 (initial and final states)."""
    kw = _ssd_inputs(2, L, seed=L)
    kw["initial_states"] = torch.randn(2, 4, 8, 16, generator=torch.Generator().manual_seed(1))
    out, final = mm.mamba_chunk_scan_combined(**kw, chunk_size=block, return_final_states=True)
    k = {n: v.to(F64) for n, v in kw.items()}
    rep = 4 // 2  # heads per group
    ref_out, ref_final = ref["ssd_minimal_discrete"](
        k["x"] * k["dt"][..., None], k["A"] * k["dt"],
        k["B"].repeat_interleave(rep, 2), k["C"].repeat_interleave(rep, 2), block,
        initial_states=k["initial_states"][:, None],
    )  # fmt: skip
    assert_close_to_reference("out", out, ref_out, torch.float32)
    assert_close_to_reference("final_states", final, ref_final, torch.float32)


def test_mamba_chunk_scan_combined_matches_mamba_ssm_chunked_ref(ref):
    """Against ``ssd_chunk_scan_combined_ref`` (D, z, dt_bias, softplus; L a multiple of the
    chunk, as it requires)."""
    kw = _ssd_inputs(2, 63, full=True, seed=5)
    del kw["initial_states"]
    out = mm.mamba_chunk_scan_combined(**kw, chunk_size=21)
    ref_out = ref["ssd_chunk_scan_combined_ref"](**kw, chunk_size=21)
    assert_close_to_reference("out", out, ref_out, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_mamba_chunk_scan_combined_matches_mamba_ssm_ssd_selective_scan(ref, dtype):
    """Against ``ssd_selective_scan`` on ``selective_scan_ref`` (dt_limit, D per head)."""
    kw = _ssd_inputs(2, 37, dtype=dtype, full=True, seed=6)
    del kw["initial_states"]
    kw["D"] = kw["D"][:, 0].contiguous()
    out = mm.mamba_chunk_scan_combined(**kw, chunk_size=16, dt_limit=(0.0, 0.05))
    ref_out = ref["ssd_selective_scan"](**kw, dt_limit=(0.0, 0.05))
    assert_close_to_reference("out", out, ref_out, dtype)


def test_varlen_states_match_ssd_minimal_discrete_per_sequence(ref):
    L, cu = 48, [0, 5, 29, 48]
    kw = _ssd_inputs(1, L, seed=9)
    h0 = torch.randn(1, 4, 8, 16, generator=torch.Generator().manual_seed(2))
    cu_seqlens, seq_idx = _packed(L, cu)
    _, varlen = mm.mamba_chunk_scan_combined(
        **kw, chunk_size=16, initial_states=h0, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
        return_varlen_states=True,
    )  # fmt: skip
    k = {n: v.to(F64) for n, v in kw.items()}
    for i, (a, b) in enumerate(itertools.pairwise(cu)):
        dt = k["dt"][:, a:b]
        _, ref_state = ref["ssd_minimal_discrete"](
            k["x"][:, a:b] * dt[..., None], k["A"] * dt,
            k["B"][:, a:b].repeat_interleave(2, 2), k["C"][:, a:b].repeat_interleave(2, 2), b - a,
            initial_states=(h0 if i == 0 else torch.zeros_like(h0)).to(F64)[:, None],
        )  # fmt: skip
        assert_close_to_reference(f"varlen_states[{i}]", varlen[i], ref_state[0], torch.float32)


@pytest.mark.slow  # three compilations
def test_compiled_fullgraph_matches_eager():
    """torch.compile(fullgraph=True) of the drop-ins, the varlen states included."""
    kw = _ssd_inputs(1, 21, full=True)
    cu_seqlens, seq_idx = _packed(21, [0, 4, 21])
    ssd = torch.compile(mm.mamba_chunk_scan_combined, fullgraph=True, backend="aot_eager")
    args = dict(chunk_size=8, seq_idx=seq_idx, cu_seqlens=cu_seqlens, return_final_states=True,
                return_varlen_states=True)  # fmt: skip
    for got, want in zip(
        ssd(**kw, **args), mm.mamba_chunk_scan_combined(**kw, **args), strict=True
    ):
        torch.testing.assert_close(got, want)
    kw = _scan_inputs(21, torch.float32, "full")
    scan = torch.compile(mm.selective_scan_fn, fullgraph=True, backend="aot_eager")
    for got, want in zip(
        scan(**kw, return_last_state=True), mm.selective_scan_fn(**kw, return_last_state=True),
        strict=True,
    ):  # fmt: skip
        torch.testing.assert_close(got, want)


# --------------------------------------------------------------------- selective_state_update


def _step_inputs(layout, batch=3, rows=3, dim=20, nheads=3, headdim=5, ngroups=1, N=16,
                 tie_hdim=False, seed=0):  # fmt: skip
    """Keyword arguments of one decode step, mamba-ssm's test ranges, every option on."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=g)

    if layout == "mamba1":
        head, B_shape = (dim,), (batch, N)
        A = -torch.rand(dim, N, generator=g) - 1.0
        dt_bias, D = torch.rand(dim, generator=g) - 4.0, rnd(dim)
        dt = rnd(batch, dim)
    else:
        head, B_shape = (nheads, headdim), (batch, ngroups, N)
        if tie_hdim:  # Mamba-2 decode: zero-stride views over headdim
            A = (-torch.rand(nheads, generator=g) - 1.0)[:, None, None].expand(-1, headdim, N)
            dt_bias = (torch.rand(nheads, generator=g) - 4.0)[:, None].expand(-1, headdim)
            D = rnd(nheads)[:, None].expand(-1, headdim)
            dt = rnd(batch, nheads)[..., None].expand(-1, -1, headdim)
        else:
            A = -torch.rand(nheads, headdim, N, generator=g) - 1.0
            dt_bias, D = torch.rand(nheads, headdim, generator=g) - 4.0, rnd(nheads, headdim)
            dt = rnd(batch, nheads, headdim)
    return dict(
        state=rnd(rows, *head, N), x=rnd(batch, *head), dt=dt, A=A, B=rnd(*B_shape),
        C=rnd(*B_shape), D=D, z=rnd(batch, *head), dt_bias=dt_bias, dt_softplus=True,
    )  # fmt: skip


STEP_CASES = [
    pytest.param("mamba1", {}, id="mamba1-dim20-N16"),
    pytest.param("mamba2", dict(ngroups=3), id="mamba2-H3-P5-G3-N16"),
    pytest.param("mamba2", dict(tie_hdim=True), id="mamba2-H3-P5-G1-N16-tied"),
]


@pytest.mark.parametrize(("layout", "opts"), STEP_CASES)
@pytest.mark.parametrize("indexed", [False, True], ids=["rows", "state_batch_indices"])
def test_selective_state_update_matches_references(ref_or_none, layout, opts, indexed):
    kw = _step_inputs(layout, rows=7 if indexed else 3, **opts)
    idx = torch.tensor([5, 0, 3], dtype=torch.int32) if indexed else None
    state = kw.pop("state")
    ours = state.clone()
    out = mm.selective_state_update(ours, **kw, state_batch_indices=idx)
    picked = idx.long() if indexed else torch.arange(3)
    k64 = {n: v.to(F64) if isinstance(v, torch.Tensor) else v for n, v in kw.items()}
    ref_out, ref_rows = selective_state_update_reference(state[picked].to(F64), **k64)
    assert_close_to_reference("out", out, ref_out, torch.float32)
    assert_close_to_reference("state", ours[picked], ref_rows, torch.float32)
    untouched = torch.ones(state.shape[0], dtype=torch.bool)
    untouched[picked] = False
    assert torch.equal(ours[untouched], state[untouched])
    if ref_or_none is None:
        return
    # mamba-ssm's selective_state_update_ref, in float64, on the picked rows (as its tests do)
    theirs = state[picked].to(F64)
    their_out = ref_or_none["selective_state_update_ref"](theirs, **k64)
    assert_close_to_reference("out vs mamba-ssm", out, their_out, torch.float32)
    assert_close_to_reference("state vs mamba-ssm", ours[picked], theirs, torch.float32)


@pytest.fixture(scope="module")
def ref_or_none():
    """mamba-ssm's references, or None (the test still checks against ssmscan's float64)."""
    return _load_references()[0]


def test_selective_state_update_more_rows_needs_indices():
    kw = _step_inputs("mamba1", rows=5)
    with pytest.raises(ValueError, match="state"):
        mm.selective_state_update(**kw)


# ------------------------------------------------------------- the runner of mamba-ssm's tests


@pytest.mark.slow  # a fresh interpreter importing torch, triton and mamba-ssm's modules: ~15 s
def test_runner_redirects_mamba_ssms_tests(ref, tmp_path):
    """benchmarks/integrations/run_mamba_ssm_tests.py --cpu on a test written as mamba-ssm's are
    (imports from mamba-ssm's modules, tensors on "cuda"): it runs on ssmscan's functions."""
    pytest.importorskip("triton", reason="mamba-ssm's modules import triton")
    pytest.importorskip("packaging", reason="mamba-ssm's modules import packaging")
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "test_selective_scan.py").write_text(
        textwrap.dedent("""
            import torch
            from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref
            from ssmscan.integrations import mamba_ssm as ours

            def test_scan():
                device = "cuda"
                assert selective_scan_fn is ours.selective_scan_fn
                u, delta = torch.randn(1, 2, 7, device=device), torch.rand(1, 2, 7, device=device)
                A, B, C = -torch.rand(2, 3), torch.randn(1, 3, 7), torch.randn(1, 3, 7)
                out = selective_scan_fn(u, delta, A, B, C, delta_softplus=True)
                ref = selective_scan_ref(u, delta, A, B, C, delta_softplus=True)
                assert torch.allclose(out, ref, rtol=1e-4, atol=1e-5)
        """)
    )
    run = subprocess.run(
        [sys.executable, str(RUNNER), "--tests", str(tmp_path), "--mamba-src", str(MAMBA_SSM_SRC),
         "--cpu", "--", "-q"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "1 passed" in run.stdout and "selective_scan_fn*" in run.stdout, run.stdout[-3000:]
