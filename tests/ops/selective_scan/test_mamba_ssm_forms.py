"""mamba-ssm's other argument forms: time-invariant B / C (dim, N), each on its own, and complex A
with complex B / C (a variable one real (batch, [G,] N, 2L), step t's parts at 2t and 2t + 1).

The float64 reference against an independent closed form; the CPU kernel path, torch.compile and
the export decompositions against the reference (outputs, final states, every gradient); the
op and its realizations refuse the forms by name; bad arguments are named.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch._dynamo.testing
import torch.nn.functional as F

import ssmscan
from ssmscan.ops.selective_scan.loop import selective_scan_loop
from ssmscan.ops.selective_scan.parallel import selective_scan_parallel
from ssmscan.testing import assert_close_to_reference, make_selective_scan_inputs

# name: (complex A, form of B, form of C); forms: "ti" (dim, N), "3d" (batch, N, L), "G2" grouped
FORMS = {
    "tiB-3dC": (False, "ti", "3d"),
    "3dB-tiC": (False, "3d", "ti"),
    "tiB-tiC": (False, "ti", "ti"),
    "G2B-tiC": (False, "G2", "ti"),
    "cx-3dB-3dC": (True, "3d", "3d"),
    "cx-G2B-G2C": (True, "G2", "G2"),
    "cx-tiB-3dC": (True, "ti", "3d"),
    "cx-3dB-tiC": (True, "3d", "ti"),
    "cx-tiB-tiC": (True, "ti", "ti"),
}
TENSOR_ARGS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")
BATCH, DIM, N = 2, 4, 3


def make_form_inputs(
    form: str,
    L: int,
    dtype: torch.dtype = torch.float32,
    has_h0: bool = True,
    seed: int = 0,
    requires_grad: bool = False,
) -> dict:
    """Keyword arguments of ``ssmscan.selective_scan`` in the given form: Mamba-like u, delta,
    D, z, delta_bias (``make_selective_scan_inputs``); a complex A is S4D-like (real part
    -exp(0.5 randn) / 2, imaginary part pi * n plus noise)."""
    is_complex, b_form, c_form = FORMS[form]
    kw = make_selective_scan_inputs(BATCH, DIM, L, N, dtype=dtype, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    pdt = torch.float64 if dtype == torch.float64 else torch.float32
    cdt = torch.complex128 if dtype == torch.float64 else torch.complex64

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    steps = 2 * L if is_complex else L

    def bc(form_: str) -> torch.Tensor:
        if form_ == "ti":
            if is_complex:
                return torch.complex(randn(DIM, N), randn(DIM, N)).to(cdt)
            return randn(DIM, N).to(pdt)
        shape = (BATCH, N, steps) if form_ == "3d" else (BATCH, 2, N, steps)
        return randn(*shape).to(dtype)

    if is_complex:
        kw["A"] = torch.complex(
            -0.5 * torch.exp(0.5 * randn(DIM, N)), math.pi * torch.arange(N) + randn(DIM, N)
        ).to(cdt)
    kw["B"], kw["C"] = bc(b_form), bc(c_form)
    if has_h0:
        h0 = 0.5 * randn(BATCH, DIM, N)
        kw["initial_state"] = (
            torch.complex(h0, randn(BATCH, DIM, N)).to(cdt) if is_complex else h0.to(pdt)
        )
    for k, v in kw.items():
        if isinstance(v, torch.Tensor) and requires_grad:
            kw[k] = v.requires_grad_()
    return kw


def to_reference(kw: dict) -> dict:
    """The same inputs in float64 (complex128), fresh leaves requiring grad."""

    def up(v: torch.Tensor) -> torch.Tensor:
        wide = torch.complex128 if v.is_complex() else torch.float64
        return v.detach().to(wide).requires_grad_()

    return {k: (up(v) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def real_view(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t) if t.is_complex() else t


def closed_form(kw: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """mamba-ssm's semantics without a recurrence: with S_t the cumulative sum of dt,
    h_t = exp(A S_t) h_{-1} + sum_{s <= t} exp(A (S_t - S_s)) dt_s B_s u_s; y_t sums C_t h_t over
    the states (2 Re of it for complex A); then D u and the silu(z) gate."""
    u, delta, A = kw["u"], kw["delta"], kw["A"]
    batch, dim, L = u.shape
    is_complex = A.is_complex()
    dt = delta + kw["delta_bias"][:, None] if kw["delta_bias"] is not None else delta
    if kw["delta_softplus"]:
        dt = F.softplus(dt)
    S = dt.cumsum(-1)  # (batch, dim, L)

    def per_step(X: torch.Tensor) -> torch.Tensor:  # -> (batch, dim, N, L), complex if A is
        if X.dim() == 2:
            return X[None, :, :, None].expand(batch, dim, -1, L)
        if is_complex:
            X = torch.view_as_complex(X.unflatten(-1, (L, 2)).contiguous())
        if X.dim() == 3:
            return X[:, None].expand(batch, dim, -1, L)
        return X.repeat_interleave(dim // X.shape[1], dim=1)

    Bs, Cs = per_step(kw["B"]), per_step(kw["C"])
    gap = S[..., :, None] - S[..., None, :]  # (batch, dim, t, s)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    decay = torch.exp(A[None, :, :, None, None] * gap[:, :, None]) * causal  # (b, d, n, t, s)
    drive = (dt * u)[:, :, None, :] * Bs  # (b, d, n, s)
    h = (decay * drive[:, :, :, None, :]).sum(-1)  # (b, d, n, t)
    if kw["initial_state"] is not None:
        h = h + torch.exp(A[None, :, :, None] * S[:, :, None, :]) * kw["initial_state"][..., None]
    y = (h * Cs).sum(2)
    y = 2 * y.real if is_complex else y
    y = y + kw["D"][:, None] * u
    y = y * F.silu(kw["z"])
    return y, h[..., -1]


@pytest.mark.parametrize("form", list(FORMS))
def test_reference_matches_closed_form(form):
    kw = to_reference(make_form_inputs(form, 37, dtype=torch.float64))
    out, last = ssmscan.selective_scan(**kw, return_last_state=True, impl="reference")
    ref_out, ref_last = closed_form(kw)
    assert_close_to_reference("out", out, ref_out, torch.float64)
    assert_close_to_reference("last_state", real_view(last), real_view(ref_last), torch.float64)


def check_against_reference(kw: dict, dtype: torch.dtype, fn=ssmscan.selective_scan) -> None:
    """``fn`` on ``kw`` against the float64 reference: out, last state and every gradient, with
    gradients of the same dtype and shape as their input."""
    out, last = fn(**kw, return_last_state=True)
    ref_in = to_reference(kw)
    ref_out, ref_last = ssmscan.selective_scan_reference(**ref_in, return_last_state=True)
    wide = kw["u"].dtype == torch.float64
    state = (torch.complex128 if wide else torch.complex64) if kw["A"].is_complex() else None
    state = state or (torch.float64 if wide else torch.float32)
    assert out.dtype == kw["u"].dtype and last.dtype == state, (out.dtype, last.dtype)
    assert_close_to_reference("out", out, ref_out, dtype)
    assert_close_to_reference("last_state", real_view(last), real_view(ref_last), dtype)

    gen = torch.Generator().manual_seed(1)
    dout = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.device, out.dtype)
    dlast = torch.randn(real_view(last).shape, generator=gen, dtype=torch.float64)
    dlast = dlast.to(last.device, real_view(last).dtype)
    names = [k for k in TENSOR_ARGS if isinstance(kw.get(k), torch.Tensor)]
    grads = torch.autograd.grad(
        (out * dout).sum() + (real_view(last) * dlast).sum(), [kw[k] for k in names]
    )
    ref_grads = torch.autograd.grad(
        (ref_out * dout.double()).sum() + (real_view(ref_last) * dlast.double()).sum(),
        [ref_in[k] for k in names],
    )
    for name, g, rg in zip(names, grads, ref_grads):
        assert g.dtype == kw[name].dtype and g.shape == kw[name].shape, name
        assert_close_to_reference(f"d{name}", real_view(g), real_view(rg), dtype)


@pytest.mark.parametrize("L", [1, 63, 257], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("form", list(FORMS))
def test_cpu_matches_reference(form, L):
    kw = make_form_inputs(form, L, requires_grad=True)
    check_against_reference(kw, torch.float32)


@pytest.mark.parametrize("form", ["tiB-3dC", "cx-G2B-G2C", "cx-tiB-3dC"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64], ids=["bf16", "fp64"])
def test_cpu_other_dtypes(form, dtype):
    kw = make_form_inputs(form, 63, dtype=dtype, requires_grad=True)
    check_against_reference(kw, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("form", ["tiB-tiC", "cx-3dB-3dC", "cx-tiB-tiC"])
def test_cpu_long_sequence(form):
    kw = make_form_inputs(form, 1000, requires_grad=True)
    check_against_reference(kw, torch.float32)


@pytest.mark.slow
def test_cpu_complex_gradients_hold_past_one_frame():
    # dt uniform in [0, 1]: the phase grows fast; in one frame of 1100 steps dA was 1.5e-5 off
    # float64, over the frames of forms.FRAME_LEN 4.7e-6 (Note [complex A])
    kw = make_form_inputs("cx-3dB-3dC", 1100)
    kw["delta"] = torch.rand(kw["delta"].shape, generator=torch.Generator().manual_seed(2))
    kw["delta_bias"], kw["delta_softplus"] = None, False
    kw = {k: (v.requires_grad_() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    check_against_reference(kw, torch.float32)


@pytest.mark.parametrize("form", ["tiB-3dC", "3dB-tiC", "cx-3dB-3dC", "cx-tiB-tiC"])
def test_mamba_ssm_call_site(form):
    # the arguments exactly as mamba-ssm's selective_scan_fn(u, delta, A, B, C, D, z, delta_bias,
    # delta_softplus, return_last_state) receives them: positional, no initial state
    kw = make_form_inputs(form, 33, has_h0=False, requires_grad=True)
    args = [kw[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
    out, last = ssmscan.selective_scan(*args, True, True)
    ref_args = [to_reference(kw)[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
    ref_out, ref_last = ssmscan.selective_scan_reference(*ref_args, True, True)
    assert_close_to_reference("out", out, ref_out, torch.float32)
    assert_close_to_reference("last_state", real_view(last), real_view(ref_last), torch.float32)
    assert last.shape == (BATCH, DIM, N) and last.is_complex() == kw["A"].is_complex()
    out.sum().backward()
    for name in ("A", "B", "C"):  # gradients shaped and typed like their inputs (mamba-ssm's)
        grad = kw[name].grad
        assert grad.shape == kw[name].shape and grad.dtype == kw[name].dtype, name
    # and a plain call returns the output alone
    assert torch.equal(ssmscan.selective_scan(*args, True), out)


BAD = {
    "ti-B-wrong-N": (
        "tiB-3dC",
        dict(B=torch.randn(DIM, N + 1)),
        ValueError,
        r"B must have shape \(4, 3\) \(dim, N\), time-invariant",
    ),
    "ti-B-bf16": (
        "tiB-3dC",
        dict(B=torch.randn(DIM, N).bfloat16()),
        TypeError,
        r"B must have dtype",
    ),
    "ti-B-complex-real-A": (
        "tiB-3dC",
        dict(B=torch.randn(DIM, N, dtype=torch.complex64)),
        TypeError,
        r"B must have dtype in \[torch.float32\] \(real like A",
    ),
    "cx-B-steps-L": (
        "cx-3dB-3dC",
        dict(B=torch.randn(BATCH, N, 9)),
        ValueError,
        r"B must have shape \(2, 3, 18\) \(batch, N, 2L\) \(complex A: real, imaginary",
    ),
    "cx-C-steps-L": (
        "cx-3dB-3dC",
        dict(C=torch.randn(BATCH, N, 9)),
        ValueError,
        r"C must have shape \(2, 3, 18\).*like B",
    ),
    "cx-ti-B-real": (
        "cx-tiB-3dC",
        dict(B=torch.randn(DIM, N)),
        TypeError,
        r"B must have dtype in \[torch.complex64\] \(complex, as A is complex\)",
    ),
    "cx-A-complex128": (
        "cx-3dB-3dC",
        dict(A=-torch.rand(DIM, N, dtype=torch.complex128)),
        TypeError,
        r"A must have dtype in \[torch.complex64\]",
    ),
    "cx-h0-real": (
        "cx-3dB-3dC",
        dict(initial_state=torch.randn(BATCH, DIM, N)),
        TypeError,
        r"initial_state must have dtype in \[torch.complex64\] \(the complex state dtype\)",
    ),
    "cx-B-complex-variable": (
        "cx-3dB-3dC",
        dict(B=torch.randn(BATCH, N, 18, dtype=torch.complex64)),
        TypeError,
        r"B must have dtype in \[torch.float32\]",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_forms_are_named(case):
    form, changes, exc, pattern = BAD[case]
    kw = make_form_inputs(form, 9) | changes
    with pytest.raises(exc, match=pattern):
        ssmscan.selective_scan(**kw)


def _op(**kw):
    args = [kw[k] for k in TENSOR_ARGS]
    return torch.ops.ssmscan.selective_scan_fwd(*args, kw["delta_softplus"])


@pytest.mark.parametrize(
    "realization",
    [
        pytest.param(_op, id="op"),
        pytest.param(selective_scan_parallel, id="parallel"),
        pytest.param(selective_scan_loop, id="loop"),
    ],
)
@pytest.mark.parametrize("form", ["tiB-3dC", "3dB-tiC", "cx-3dB-3dC"])
def test_op_and_realizations_refuse_the_forms_by_name(form, realization):
    kw = make_form_inputs(form, 9)
    pattern = r"complex A" if FORMS[form][0] else r"time-invariant \(dim, N\)"
    with pytest.raises(ValueError, match=pattern + r".*call ssmscan.selective_scan"):
        realization(**kw)


class _S4DLike(torch.nn.Module):
    """A layer in an S4D style: parameters A, B (time-invariant), D, delta_bias; C per step."""

    def __init__(self, kw: dict) -> None:
        super().__init__()
        for name in ("A", "B", "D", "delta_bias"):
            self.register_parameter(name, torch.nn.Parameter(kw[name].detach().clone()))

    def forward(self, u, delta, C, z):
        return ssmscan.selective_scan(
            u, delta, self.A, self.B, C, self.D, z, self.delta_bias, True, True
        )


@pytest.mark.parametrize("realization", ["parallel", "loop"])
@pytest.mark.parametrize("form", ["tiB-3dC", "cx-tiB-3dC"])
def test_export_and_decompose(form, realization):
    from ssmscan.passes import decompose_selective_scan

    kw = make_form_inputs(form, 21, has_h0=False)
    module = _S4DLike(kw)
    inputs = (kw["u"], kw["delta"], kw["C"], kw["z"])
    ep = torch.export.export(module, inputs)
    assert decompose_selective_scan(ep, realization).changed
    assert not any("ssmscan" in str(n.target) for n in ep.graph.nodes)
    out, last = ep.module()(*inputs)
    ref_out, ref_last = ssmscan.selective_scan_reference(**to_reference(kw), return_last_state=True)
    assert_close_to_reference("out", out, ref_out, torch.float32)
    assert_close_to_reference("last_state", real_view(last), real_view(ref_last), torch.float32)


@pytest.mark.parametrize("form", ["tiB-tiC", "cx-G2B-G2C"])
def test_compiles_fullgraph(form):
    kw = make_form_inputs(form, 21, requires_grad=True)
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(ssmscan.selective_scan, backend=counter, fullgraph=True)
    check_against_reference(kw, torch.float32, fn=compiled)
    assert counter.frame_count == 1


def _to_cuda(kw: dict) -> dict:
    return {
        k: (v.detach().cuda().requires_grad_() if isinstance(v, torch.Tensor) else v)
        for k, v in kw.items()
    }


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("L", [1, 63, 257], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("form", list(FORMS))
def test_gpu_matches_reference(form, dtype, L):
    # the eager CUDA fast path (plain tensors) on the Triton kernels
    kw = _to_cuda(make_form_inputs(form, L, dtype=dtype))
    check_against_reference(kw, dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("form", ["tiB-3dC", "cx-tiB-3dC"])
def test_gpu_compiled_matches_reference(form):
    # the op path (triton_op under torch.compile, Inductor)
    kw = _to_cuda(make_form_inputs(form, 63))
    compiled = torch.compile(ssmscan.selective_scan, fullgraph=True)
    check_against_reference(kw, torch.float32, fn=compiled)
