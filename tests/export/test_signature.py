"""``Signature.check``: what ``ExportResult.run`` refuses before an input reaches an artifact, each
refusal naming the input, what it expected and what it got."""

from __future__ import annotations

import pytest
import torch

from ssmscan.export import Signature, TensorSpec

STEP = Signature(
    (
        TensorSpec("input_ids", torch.int64, ("batch", "seq_len"), (0, 256)),
        TensorSpec("ssm_state_0", torch.float32, ("batch", 128, 16)),
    ),
    (TensorSpec("logits", torch.float32, ("batch", "seq_len", 256)),),
    {"batch": (1, None), "seq_len": (2, 4096)},
)
STATIC = Signature(
    (TensorSpec("input_ids", torch.int64, (1, 9), (0, 256)),),
    (TensorSpec("logits", torch.float32, (1, 9, 256)),),
)


def _ids(*shape: int) -> torch.Tensor:
    return torch.randint(0, 256, shape)


def test_accepts_inputs_in_range_and_returns_them_flat():
    ids, state = _ids(3, 5), torch.randn(3, 128, 16)
    flat = STEP.check((ids, state))
    assert flat[0] is ids and flat[1] is state


@pytest.mark.parametrize(
    ("inputs", "error", "match"),
    [
        ((_ids(3, 5), torch.randn(2, 128, 16)), ValueError, r"batch = 3 \(as in input_ids\)"),
        ((_ids(3, 5), torch.randn(3, 64, 16)), ValueError, "dimension 1 fixed at 128"),
        ((_ids(3, 5000), torch.randn(3, 128, 16)), ValueError, r"seq_len .* in \[2, 4096\]"),
        ((_ids(3, 5), torch.randn(3, 128, 16).double()), TypeError, "ssm_state_0.*float64"),
        ((_ids(3, 5), [1.0]), TypeError, "ssm_state_0 must be a tensor; got float"),
        ((_ids(3, 5),), ValueError, r"takes 2 input\(s\) \(input_ids, ssm_state_0\); got 1"),
        ((_ids(3, 5).to("meta"), torch.randn(3, 128, 16)), ValueError, "must be on cpu"),
    ],
    ids=["batch-differs", "static-dim", "length-range", "dtype", "not-a-tensor", "count", "device"],
)
def test_refuses_with_a_message_naming_the_input(inputs, error, match):
    with pytest.raises(error, match=match):
        STEP.check(inputs)


def test_static_batch_refuses_another_batch():
    with pytest.raises(ValueError, match=r"dimension 0 fixed at 1; got shape \(3, 9\)"):
        STATIC.check((_ids(3, 9),))


def test_describe_lists_names_dtypes_and_dims():
    assert STATIC.describe().splitlines() == [
        "inputs:  input_ids: int64[1, 9] in [0, 256)",
        "outputs: logits: float32[1, 9, 256]",
        "dims:    none (static)",
    ]
