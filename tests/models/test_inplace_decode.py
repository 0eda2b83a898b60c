"""``inplace=True`` (Note [in-place decode] in ``ssmscan.models.mamba``): the LMs write their new
state into the given one, with the values of the functional call, for Mamba-1 and Mamba-2; on
CUDA a captured in-place decode step replays a whole decode loop from static buffers."""

import pytest
import torch
from mamba2_configs import ODD

from ssmscan.models import Mamba2Config, Mamba2LM, MambaConfig, MambaLM, MambaState
from ssmscan.testing import assert_close_to_reference

MODELS = {
    "mamba1-tiny": lambda: MambaLM.from_config(MambaConfig.preset("tiny")),
    "mamba1-odd": lambda: MambaLM.from_config(
        MambaConfig(d_model=36, n_layer=3, vocab_size=100, d_state=5, d_conv=3, seed=3)
    ),
    "mamba2-tiny": lambda: Mamba2LM.from_config(Mamba2Config.preset("tiny")),
    "mamba2-odd": lambda: Mamba2LM.from_config(ODD),
}


def _ids(batch, length, seed=0):
    return torch.randint(0, 100, (batch, length), generator=torch.Generator().manual_seed(seed))


def _clone(state: MambaState) -> MambaState:
    return MambaState(tuple(t.clone() for t in state.conv_states),
                      tuple(t.clone() for t in state.ssm_states))  # fmt: skip


def _pointers(state: MambaState) -> list[int]:
    return [t.data_ptr() for t in state.conv_states + state.ssm_states]


def _assert_states_equal(name, got: MambaState, want: MambaState, dtype) -> None:
    for kind in ("conv_states", "ssm_states"):
        for i, (a, b) in enumerate(zip(getattr(got, kind), getattr(want, kind))):
            assert a.shape == b.shape and a.dtype == b.dtype
            assert_close_to_reference(f"{name} {kind}[{i}]", a, b, dtype)


@pytest.mark.parametrize("name", list(MODELS))
def test_inplace_calls_equal_functional_calls(name):
    """A prefill, a chunk and decode steps, each in place on a state buffer, against the
    functional calls: same logits and states, the buffer's tensors returned and written."""
    model = MODELS[name]().eval()
    ids = _ids(2, 19, seed=len(name))
    with torch.no_grad():
        _, state = model(ids[:, :5])
        buffer = _clone(state)
        ptrs = _pointers(buffer)
        for start, stop in [(5, 12), (12, 13), (13, 14), (14, 15), (15, 19)]:
            want, state = model(ids[:, start:stop], state)
            got, returned = model(ids[:, start:stop], buffer, inplace=True)
            assert returned is buffer and _pointers(returned) == ptrs
            assert_close_to_reference(f"{name} logits {start}:{stop}", got, want, torch.float32)
            _assert_states_equal(f"{name} {start}:{stop}", buffer, state, torch.float32)


@pytest.mark.parametrize("family", ["mamba1", "mamba2"])
def test_inplace_needs_a_state(family):
    model = MODELS[f"{family}-tiny"]().eval()
    with pytest.raises(ValueError, match="inplace=True writes the new state"):
        model(_ids(1, 3), inplace=True)
    mixer = model.layers[0].mixer
    with pytest.raises(ValueError, match="pass both conv_state and ssm_state"):
        mixer(torch.randn(1, 3, model.config.d_model), inplace=True)


# ---- CUDA ----


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ["mamba1-tiny", "mamba2-tiny", "mamba2-odd"])
def test_gpu_inplace_decode_replays_from_a_cuda_graph(name, dtype):
    """One in-place decode step captured in a CUDA graph (the kernels writing the static state
    buffers, no copies) replayed for six tokens, against eager functional steps."""
    model = MODELS[name]().to("cuda", dtype).eval()
    ids = _ids(3, 16, seed=2).cuda()
    with torch.inference_mode():
        _, state = model(ids[:, :10])
        static, token = _clone(state), ids[:, 10:11].clone()
        model(token, _clone(state), inplace=True)  # compile the kernels outside the capture
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.cuda.graph(graph):
            logits, _ = model(token, static, inplace=True)
        torch.cuda.current_stream().wait_stream(stream)
        for t in range(10, 16):
            token.copy_(ids[:, t : t + 1])
            graph.replay()
            want, state = model(ids[:, t : t + 1], state)
            assert_close_to_reference(f"{name} logits step {t}", logits, want, dtype)
            _assert_states_equal(f"{name} step {t}", static, state, dtype)
