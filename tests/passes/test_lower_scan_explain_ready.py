import pytest
import torch
from hop_graphs import assert_plain, export
from torch._higher_order_ops.scan import scan

from ssmscan.passes import (
    TENSORRT_PIPELINE,
    check_tensorrt_ready,
    explain,
    lower_scan,
    run_pipeline,
    tensorrt_op_set,
)
from ssmscan.testing.scan_oracle import affine


def _mamba_step(h, x):
    dt, u, a = x
    new = torch.exp(dt * a) * h + dt * u
    return new, new.clone()


def _prev_out(h, x):
    a, b = x
    new = a * h + b
    return new, h.clone()


def _quadratic(h, x):
    a, b = x
    new = a * h * h + b
    return new, new.clone()


class Scan(torch.nn.Module):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def forward(self, h0, *xs):
        return scan(self.step, h0, tuple(xs), dim=1)


def _loop(step, h0, xs):
    h, ys = h0.double(), []
    for t in range(xs[0].shape[1]):
        h, y = step(h, [x[:, t].double() for x in xs])
        ys.append(y)
    return h, torch.stack(ys, 1)


@pytest.mark.parametrize("algorithm", ["hillis_steele", "blelloch", "chunked"])
@pytest.mark.parametrize("length", [1, 63, 1000], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("step", [_mamba_step, _prev_out], ids=["mamba", "prev_state"])
def test_affine_scan_lowered(step, length, algorithm):
    g = torch.Generator().manual_seed(length)
    h0 = torch.randn(3, 4, generator=g)
    if step is _mamba_step:
        xs = [
            0.1 * torch.rand(3, length, 4, generator=g),
            torch.randn(3, length, 4, generator=g),
            -torch.rand(3, length, 4, generator=g),
        ]
    else:
        xs = [
            0.5 + 0.5 * torch.rand(3, length, 4, generator=g),
            torch.randn(3, length, 4, generator=g),
        ]
    ep = torch.export.export(Scan(step), (h0, *xs))
    result = lower_scan(ep, algorithm=algorithm)
    assert result.changed and result.decisions[0].lowered
    assert_plain(ep)
    h, ys = ep.module()(h0, *xs)
    rh, rys = _loop(step, h0, xs)
    torch.testing.assert_close(h.double(), rh, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ys.double(), rys, rtol=1e-5, atol=1e-5)
    assert check_tensorrt_ready(ep.run_decompositions()).ready


def test_non_affine_scan_left_alone():
    xs = [torch.rand(3, 5, 4), torch.randn(3, 5, 4)]
    ep = torch.export.export(Scan(_quadratic), (torch.randn(3, 4), *xs))
    before = ep.graph_module.code
    result = lower_scan(ep)
    assert not result.changed and "degree" in result.decisions[0].reason
    assert ep.graph_module.code == before
    assert "degree" in str(explain(ep))


def test_explain_before_and_after():
    xs = [0.5 + 0.5 * torch.rand(4, 9), torch.randn(4, 9)]
    ep = export("direct", affine, xs, dim=1)
    report = explain(ep)
    assert len(report.decisions) == 1 and not report.decisions[0].lowered
    assert "would" in str(report)
    run_pipeline(ep, TENSORRT_PIPELINE)
    after = explain(ep)
    assert len(after.decisions) == 1 and after.decisions[0].lowered
    assert after.decisions[0].algorithm is not None


def test_checker_flags_hops_factories_and_unconverted_ops():
    xs = [0.5 + 0.5 * torch.rand(4, 9), torch.randn(4, 9)]
    ep = export("direct", affine, xs, dim=0).run_decompositions()
    assert "torch.ops.higher_order.associative_scan" in check_tensorrt_ready(ep).higher_order

    def f(x):
        return torch.ones_like(x) + torch.kthvalue(x, 2).values

    gm = torch.fx.experimental.proxy_tensor.make_fx(f)(torch.randn(3))
    r = check_tensorrt_ready(gm)
    assert not r.ready and r.banned_factories == ("aten.ones_like.default",)
    assert "aten.kthvalue.default" in r.unsupported


def test_converter_data_has_provenance():
    converters, decomposed, provenance = tensorrt_op_set()
    assert provenance["torch_tensorrt"].startswith("2.13")
    assert {
        "aten.slice.Tensor",
        "aten.cat.default",
        "aten.mul.Tensor",
        "aten.constant_pad_nd.default",
    } <= converters
    assert "aten.ones_like.default" not in converters
    assert decomposed


@pytest.mark.tensorrt
def test_converter_data_matches_installed_torch_tensorrt():
    try:  # needs real TensorRT libraries, which these CPU machines lack
        import torch_tensorrt  # noqa: F401
    except Exception as e:  # torch_tensorrt raises a bare Exception when libnvinfer is missing
        pytest.skip(f"torch-tensorrt not importable here: {str(e)[:80]}")
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import DYNAMO_CONVERTERS

    from ssmscan.passes.tensorrt_ready import target_name

    converters, _, provenance = tensorrt_op_set()
    import importlib.metadata

    if importlib.metadata.version("torch-tensorrt") != provenance["torch_tensorrt"]:
        pytest.skip("installed torch-tensorrt differs from the version the data was made with")
    assert {target_name(t) for t in DYNAMO_CONVERTERS.keys()} == converters
