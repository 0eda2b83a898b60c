import io
import logging

import pytest
import torch
from hop_graphs import assert_plain, call_targets, export, run

from ssmscan.passes import check_tensorrt_ready, explain, lower_associative_scan
from ssmscan.testing.scan_oracle import affine, sequential_scan

LENGTHS = [1, 2, 3, 7, 64, 100, 1000, pytest.param(4097, marks=pytest.mark.slow)]


def _affine_inputs(length, dim, seed, broadcast=True):
    g = torch.Generator().manual_seed(seed)
    shape = [2, 3, 4]
    shape[dim] = length
    a_shape = list(shape)
    if broadcast:
        a_shape[(dim % 3 + 1) % 3] = 1
    return [0.5 + 0.5 * torch.rand(a_shape, generator=g), torch.randn(shape, generator=g)]


def _check(ep, combine, xs, dim, reverse, tol=1e-5):
    got = run(ep, *xs)
    full = torch.broadcast_tensors(*xs) if len({x.dim() for x in xs}) == 1 else xs
    ref = sequential_scan(combine, [f.contiguous() for f in full], dim, reverse)
    for y, r in zip(got, ref, strict=True):
        torch.testing.assert_close(y.double().expand_as(r), r, rtol=tol, atol=tol)


@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
@pytest.mark.parametrize("dim", [0, 1, -1], ids=lambda d: f"dim{d}")
@pytest.mark.parametrize("length", LENGTHS, ids=lambda n: f"L{n}")
@pytest.mark.parametrize("kind", ["fake_cuda", "direct"])
def test_affine_lowered_matches_loop(kind, length, dim, reverse):
    xs = _affine_inputs(length, dim, seed=length + dim)
    ep = export(kind, affine, xs, dim, reverse)
    result = lower_associative_scan(ep)
    assert result.changed and all(d.lowered for d in result.decisions)
    assert "affine" in result.decisions[0].reason
    assert_plain(ep)
    _check(ep, affine, xs, dim, reverse)
    decomposed = ep.run_decompositions()
    assert_plain(decomposed)
    assert check_tensorrt_ready(decomposed).ready, check_tensorrt_ready(decomposed)


def _b_first(lhs, rhs):  # operand order (b, a), commuted products
    (b1, a1), (b2, a2) = lhs, rhs
    return [b2 + b1 * a2, a2 * a1]


def _addcmul(lhs, rhs):
    return [lhs[0] * rhs[0], torch.addcmul(rhs[1], rhs[0], lhs[1])]


def _casts(lhs, rhs):
    a1, b1, a2, b2 = (x.to(torch.float64) for x in (*lhs, *rhs))
    return [(a1 * a2).to(torch.float32), (a2 * b1 + b2).to(torch.float32)]


def _shared_a(lhs, rhs):  # 3 leaves: two states sharing one decay
    (a1, b1, c1), (a2, b2, c2) = lhs, rhs
    return [a1 * a2, a2 * b1 + b2, c2 + a2 * c1]


AFFINE_VARIANTS = {
    "b_first": (_b_first, [1, 0]),
    "addcmul": (_addcmul, [0, 1]),
    "casts": (_casts, [0, 1]),
    "shared_a": (_shared_a, [0, 1, 1]),
}


# torch's front door rejects dtype casts in a pointwise combine; such graphs come from direct calls.
VARIANT_CASES = [
    (k, n)
    for n in sorted(AFFINE_VARIANTS)
    for k in ("fake_cuda", "direct")
    if (k, n) != ("fake_cuda", "casts")
]


@pytest.mark.parametrize(
    ("kind", "name"), VARIANT_CASES, ids=[f"{k}-{n}" for k, n in VARIANT_CASES]
)
def test_affine_recognised_structurally(kind, name):
    combine, roles = AFFINE_VARIANTS[name]
    g = torch.Generator().manual_seed(5)
    xs = [
        0.5 + 0.5 * torch.rand(4, 100, 3, generator=g)
        if r == 0
        else torch.randn(4, 100, 3, generator=g)
        for r in roles
    ]
    ep = export(kind, combine, xs, dim=1, reverse=True)
    result = lower_associative_scan(ep, algorithm="blelloch")
    assert result.decisions[0].lowered and "affine" in result.decisions[0].reason, result
    assert_plain(ep)
    _check(ep, combine, xs, 1, True)


def _lae(lhs, rhs):
    return [torch.logaddexp(lhs[0], rhs[0])]


def _lae_by_hand(lhs, rhs):
    m = torch.maximum(lhs[0], rhs[0])
    return [m + torch.log1p(torch.exp(-torch.abs(lhs[0] - rhs[0])))]


def _softmax3(lhs, rhs):
    (m1, s1, w1), (m2, s2, w2) = lhs, rhs
    m = torch.maximum(m1, m2)
    e1, e2 = torch.exp(m1 - m), torch.exp(m2 - m)
    return [m, s1 * e1 + s2 * e2, w1 * e1 + w2 * e2]


def _complex_affine(lhs, rhs):  # (a, b) complex, as real/imag leaves
    (ar1, ai1, br1, bi1), (ar2, ai2, br2, bi2) = lhs, rhs
    return [
        ar1 * ar2 - ai1 * ai2,
        ar1 * ai2 + ai1 * ar2,
        ar2 * br1 - ai2 * bi1 + br2,
        ar2 * bi1 + ai2 * br1 + bi2,
    ]


def _matmul2x2(lhs, rhs):
    (a, b, c, d), (e, f, g, h) = lhs, rhs
    return [a * e + b * g, a * f + b * h, c * e + d * g, c * f + d * h]


GENERIC = {
    "sum": (lambda lhs, rhs: [lhs[0] + rhs[0]], 1),
    "max": (lambda lhs, rhs: [torch.maximum(lhs[0], rhs[0])], 1),
    "logaddexp": (_lae, 1),  # CPU torch has no fake CUDA logaddexp: made by a direct call
    "logaddexp_by_hand": (_lae_by_hand, 1),
    "softmax3": (_softmax3, 3),
    "complex_affine": (_complex_affine, 4),
    "matmul2x2": (_matmul2x2, 4),
}


@pytest.mark.parametrize("algorithm", ["hillis_steele", "blelloch", "chunked"])
@pytest.mark.parametrize("length", [7, 1000], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("name", sorted(GENERIC))
def test_pointwise_combines_lowered(name, length, algorithm):
    combine, k = GENERIC[name]
    g = torch.Generator().manual_seed(k)
    scale = 0.5 if k == 4 else 1.0  # keep products of 2x2 / complex factors bounded
    xs = [scale * torch.rand(3, length, 2, generator=g) for _ in range(k)]
    ep = export(
        "direct" if name == "logaddexp" else "fake_cuda", combine, xs, dim=1, reverse=length == 7
    )
    result = lower_associative_scan(ep, algorithm=algorithm)
    assert result.decisions[0].lowered and "generic" in result.decisions[0].reason, result
    assert_plain(ep)
    _check(ep, combine, xs, 1, length == 7, tol=1e-4)
    assert check_tensorrt_ready(ep.run_decompositions()).ready


def test_non_pointwise_combine_left_alone():
    class NotPointwise(torch.nn.Module):
        def __init__(self):
            super().__init__()
            x = torch.randn(3, 3)
            self.cg = torch.fx.experimental.proxy_tensor.make_fx(lambda lhs, rhs: (lhs @ rhs,))(
                x, x.clone()
            )

        def forward(self, x):
            from torch._higher_order_ops.associative_scan import associative_scan_op

            return associative_scan_op(self.cg, [x], ())

    ep = torch.export.export(NotPointwise(), (torch.randn(5, 3, 3),))
    before = ep.graph_module.code
    result = lower_associative_scan(ep)
    assert not result.changed and not result.decisions[0].lowered
    assert "not pointwise" in result.decisions[0].reason
    assert ep.graph_module.code == before
    assert "not pointwise" in str(explain(ep))


def test_several_hops_in_one_graph():
    class Two(torch.nn.Module):
        def forward(self, a, b, c):
            from torch._higher_order_ops.associative_scan import associative_scan as s

            h = s(
                lambda lhs, rhs: tuple(affine(lhs, rhs)), (a, b), dim=0, combine_mode="pointwise"
            )[1]
            m = s(
                lambda lhs, rhs: torch.maximum(lhs, rhs),
                c,
                dim=1,
                reverse=True,
                combine_mode="pointwise",
            )
            return h + m

    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = [torch.empty(9, 4, device="cuda") for _ in range(3)]
        ep = torch.export.export(Two(), tuple(fake))
    result = lower_associative_scan(ep)
    assert len(result.decisions) == 2 and all(d.lowered for d in result.decisions)
    assert_plain(ep)
    a, b, c = 0.5 + 0.5 * torch.rand(9, 4), torch.randn(9, 4), torch.randn(9, 4)
    ref = (
        sequential_scan(affine, [a, b], 0)[1]
        + torch.flip(torch.cummax(torch.flip(c, [1]), 1).values, [1]).double()
    )
    torch.testing.assert_close(run(ep, a, b, c)[0].double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["fake_cuda", "direct"])
def test_dynamic_length_padded_to_bound(kind):
    xs = _affine_inputs(7, 1, seed=1, broadcast=False)
    n = torch.export.Dim("n", min=2, max=300)
    ep = export(kind, affine, xs, dim=1, reverse=True, dynamic_shapes=({1: n}, {1: n}))
    result = lower_associative_scan(ep)
    assert result.decisions[0].lowered and "bound 300" in result.decisions[0].reason
    assert_plain(ep)
    for length in (2, 5, 64, 299, 300):
        ys = _affine_inputs(length, 1, seed=length, broadcast=False)
        _check(ep, affine, ys, 1, True)


def test_unbounded_dynamic_length_left_alone():
    xs = _affine_inputs(7, 0, seed=1, broadcast=False)
    n = torch.export.Dim("n", min=2)
    ep = export("direct", affine, xs, dim=0, dynamic_shapes=({0: n}, {0: n}))
    before = ep.graph_module.code
    result = lower_associative_scan(ep)
    assert not result.changed and "no finite upper bound" in result.decisions[0].reason
    assert ep.graph_module.code == before


def test_graph_module_input_and_meta_vals():
    xs = _affine_inputs(100, 1, seed=2)
    ep = export("fake_cuda", affine, xs, dim=1)
    gm = ep.graph_module
    assert lower_associative_scan(gm).changed
    for node in gm.graph.nodes:
        if node.op == "call_function":
            assert "val" in node.meta, node


@pytest.mark.parametrize("kind", ["fake_cuda", "direct"])
def test_reexport_validate_save_load(kind, caplog):
    # torch 2.13's serializer logs a malformed WARNING (a "%s" without its argument) when loading a
    # program holding fake CUDA tensors falls back to weights_only=False; pytest fails a test on a
    # log record that cannot be formatted, so that one logger is kept below WARNING here.
    caplog.set_level(logging.ERROR, logger="torch._export.serde.serialize")
    xs = _affine_inputs(1000, 1, seed=3)
    ep = export(kind, affine, xs, dim=1, reverse=True)
    lower_associative_scan(ep)
    ep.validate() if hasattr(ep, "validate") else ep._validate()
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    loaded = torch.export.load(buf)
    _check(loaded, affine, xs, 1, True)
    again = torch.export.export(ep.module(), tuple(xs))
    assert_plain(again)
    _check(again, affine, xs, 1, True)
    decomposed = ep.run_decompositions()
    _check(decomposed, affine, xs, 1, True)


def test_after_run_decompositions():
    xs = _affine_inputs(100, 1, seed=4)
    ep = export("fake_cuda", affine, xs, dim=1).run_decompositions()
    assert any("associative_scan" in n for n in call_targets(ep))
    assert lower_associative_scan(ep).changed
    assert_plain(ep)
    _check(ep, affine, xs, 1, False)
    assert check_tensorrt_ready(ep.run_decompositions()).ready


def _node_count(length):
    xs = _affine_inputs(length, 0, seed=0, broadcast=False)
    ep = export("fake_cuda", affine, xs, dim=0)
    lower_associative_scan(ep)
    return len(ep.graph.nodes)


def test_graph_size_grows_logarithmically():
    counts = {n: _node_count(n) for n in (64, 1024, 16384)}
    # 16x and 256x longer scans: a constant number of extra nodes per doubling, no blow-up
    assert counts[16384] - counts[1024] <= 30 * 4, counts  # at most ~30 nodes per doubling
    assert counts[16384] - counts[1024] <= counts[1024] - counts[64] + 20, counts


def test_declines_leave_graph_untouched_and_pass_is_idempotent():
    xs = _affine_inputs(10, 0, seed=0)
    ep = export("direct", affine, xs, dim=0)
    assert lower_associative_scan(ep).changed
    code = ep.graph_module.code
    assert not lower_associative_scan(ep).changed
    assert ep.graph_module.code == code


@pytest.mark.parametrize("kind", ["fake_cuda", "direct"])
def test_assert_plain_catches_an_unlowered_hop(kind):
    """The helper every lowering test relies on must fail on a graph that still holds the HOP."""
    ep = export(kind, affine, _affine_inputs(7, 0, 0), dim=0)
    with pytest.raises(AssertionError, match="associative_scan"):
        assert_plain(ep)
