import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ssmscan.scan import ALGORITHMS, affine_scan, associative_scan, choose_algorithm
from ssmscan.testing.scan_oracle import affine, sequential_scan

LENGTHS = [1, 2, 3, 7, 63, 64, 100, 1000, 4097]
DIMS = [0, 1, -1]
BANNED = ("ones_like", "zeros_like", "empty_like", "full_like", "new_")


def _shape(length, dim):
    shape = [3, 4, 2]
    shape[dim] = length
    return shape


def _decay_input(length, dim, broadcast, seed):
    g = torch.Generator().manual_seed(seed)
    shape = _shape(length, dim)
    a_shape = list(shape)
    if broadcast:  # a shared over one non-scan dim
        a_shape[(dim % 3 + 1) % 3] = 1
    a = 0.5 + 0.5 * torch.rand(a_shape, generator=g)
    b = torch.randn(shape, generator=g)
    return a, b


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
@pytest.mark.parametrize("dim", DIMS, ids=lambda d: f"dim{d}")
@pytest.mark.parametrize("length", LENGTHS, ids=lambda n: f"L{n}")
def test_affine_scan_matches_loop(length, dim, reverse, algorithm):
    a, b = _decay_input(length, dim, broadcast=length % 2 == 1, seed=length * 7 + dim)
    ref_a, ref_h = sequential_scan(affine, [a.expand_as(b), b], dim, reverse)
    got_a, got_h = affine_scan(a, b, dim, reverse, algorithm=algorithm, return_a=True)
    torch.testing.assert_close(got_h.double(), ref_h, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_a.double().expand_as(ref_a), ref_a, rtol=1e-5, atol=1e-5)
    assert got_a.shape == a.shape  # the product prefix stays at a's (broadcast) shape
    h_only = affine_scan(a, b, dim, reverse, algorithm=algorithm)
    torch.testing.assert_close(h_only, got_h)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
@pytest.mark.parametrize("length", [1, 7, 100], ids=lambda n: f"L{n}")
def test_affine_initial_state(length, reverse, algorithm):
    a, b = _decay_input(length, 1, broadcast=False, seed=3)
    h0 = torch.randn(3, 2)
    # prepend the initial state as a step with a = 1 (applied first in scan order)
    one = torch.ones(3, 1, 2)
    if reverse:
        aa, bb = torch.cat([a, one], 1), torch.cat([b, h0[:, None]], 1)
        ref = sequential_scan(affine, [aa, bb], 1, True)[1][:, :-1]
    else:
        aa, bb = torch.cat([one, a], 1), torch.cat([h0[:, None], b], 1)
        ref = sequential_scan(affine, [aa, bb], 1)[1][:, 1:]
    got = affine_scan(a, b, 1, reverse, initial=h0, algorithm=algorithm)
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


def _logaddexp(lhs, rhs):
    return [torch.logaddexp(lhs[0], rhs[0])]


def _online_softmax(lhs, rhs):  # 3 leaves: running max, normaliser, weighted sum
    (m1, s1, w1), (m2, s2, w2) = lhs, rhs
    m = torch.maximum(m1, m2)
    e1, e2 = torch.exp(m1 - m), torch.exp(m2 - m)
    return [m, s1 * e1 + s2 * e2, w1 * e1 + w2 * e2]


def _matmul2x2(lhs, rhs):  # non-commutative: 2x2 matrices as 4 leaves
    (a, b, c, d), (e, f, g, h) = lhs, rhs
    return [a * e + b * g, a * f + b * h, c * e + d * g, c * f + d * h]


COMBINES = {
    "sum": (lambda lhs, rhs: [lhs[0] + rhs[0]], 1),
    "max": (lambda lhs, rhs: [torch.maximum(lhs[0], rhs[0])], 1),
    "logaddexp": (_logaddexp, 1),
    "affine": (affine, 2),
    "softmax3": (_online_softmax, 3),
    "matmul2x2": (_matmul2x2, 4),
}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("reverse", [False, True], ids=["fwd", "rev"])
@pytest.mark.parametrize("dim", DIMS, ids=lambda d: f"dim{d}")
@pytest.mark.parametrize("length", [1, 2, 3, 7, 100, 1000], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("name", sorted(COMBINES))
def test_generic_scan_matches_loop(name, length, dim, reverse, algorithm):
    combine, k = COMBINES[name]
    g = torch.Generator().manual_seed(length + 11 * k)
    leaves = [torch.randn(_shape(length, dim), generator=g) for _ in range(k)]
    if name in ("affine", "matmul2x2"):  # keep products bounded
        leaves = [
            0.5 + 0.5 * torch.rand(x.shape, generator=g) if i % 3 == 0 else x * 0.5
            for i, x in enumerate(leaves)
        ]
    ref = sequential_scan(combine, leaves, dim, reverse)
    got = associative_scan(
        lambda lhs, rhs: combine(list(lhs), list(rhs)), leaves, dim, reverse, algorithm
    )
    for y, r in zip(got, ref, strict=True):
        assert y.dtype == leaves[0].dtype
        torch.testing.assert_close(y.double(), r, rtol=1e-4, atol=1e-4)


def test_pytree_and_dtypes():
    x = {"s": torch.arange(1, 11, dtype=torch.int64), "m": torch.randn(10, dtype=torch.bfloat16)}
    out = associative_scan(
        lambda lhs, rhs: {"s": lhs["s"] + rhs["s"], "m": torch.maximum(lhs["m"], rhs["m"])},
        x,
        0,
        algorithm="chunked",
        chunk_size=4,
    )
    assert out["s"].dtype == torch.int64 and out["m"].dtype == torch.bfloat16
    torch.testing.assert_close(out["s"], torch.cumsum(x["s"], 0))
    torch.testing.assert_close(out["m"], torch.cummax(x["m"], 0).values)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_traced_ops_are_plain_and_convertible(algorithm):
    """The library traces to slice/cat/pointwise/reshape ops only; no factory, no HOP."""
    from ssmscan.passes import check_tensorrt_ready

    a, b = _decay_input(100, 1, broadcast=True, seed=0)
    gm = make_fx(lambda a, b: affine_scan(a, b, 1, True, algorithm=algorithm))(a, b)
    names = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert not any(bad in n for n in names for bad in BANNED)
    assert check_tensorrt_ready(gm).ready, check_tensorrt_ready(gm)


def test_auto_choice():
    assert choose_algorithm(8) in ALGORITHMS
    assert choose_algorithm(100000) in ALGORITHMS
    with pytest.raises(ValueError):
        choose_algorithm(8, "bogus")  # type: ignore[arg-type]
