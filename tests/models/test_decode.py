"""Prefill, chunked prefill and decode of ssmscan.models.MambaLM agree with one forward."""

import dataclasses

import pytest
import torch

from ssmscan.models import MambaConfig, MambaLM, MambaState
from ssmscan.testing import assert_close_to_reference

TINY = MambaConfig.preset("tiny")
# d_conv 3 and an odd width; a padded vocabulary (100 -> 104)
ODD = MambaConfig(d_model=36, n_layer=3, vocab_size=100, d_state=5, d_conv=3, seed=3)
F32 = torch.float32


@pytest.fixture(scope="module")
def tiny() -> MambaLM:
    return MambaLM.from_config(TINY).eval()


def _ids(batch: int, length: int, vocab: int = 256, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def _assert_states_close(name: str, state: MambaState, ref: MambaState) -> None:
    assert state.n_layer == ref.n_layer
    for i, (a, b) in enumerate(zip(state.conv_states, ref.conv_states)):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert_close_to_reference(f"{name} conv_state[{i}]", a, b, F32)
    for i, (a, b) in enumerate(zip(state.ssm_states, ref.ssm_states)):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert_close_to_reference(f"{name} ssm_state[{i}]", a, b, F32)


@pytest.mark.parametrize(
    "L,k", [(1, 4), (7, 5), (63, 3), (1000, 2)], ids=["L1-k4", "L7-k5", "L63-k3", "L1000-k2"]
)
def test_prefill_then_decode_equals_one_forward(tiny, L, k):
    ids = _ids(2, L + k, seed=L)
    with torch.no_grad():
        full, full_state = tiny(ids)
        logits, state = tiny(ids[:, :L])
        steps = [logits]
        for t in range(L, L + k):
            step, state = tiny(ids[:, t : t + 1], state)
            steps.append(step)
    assert_close_to_reference("logits", torch.cat(steps, dim=1), full, F32)
    _assert_states_close("final", state, full_state)


def test_decode_from_an_odd_config():
    model = MambaLM.from_config(ODD).eval()
    ids = _ids(3, 12, vocab=ODD.vocab_size)
    with torch.no_grad():
        full, full_state = model(ids)
        logits, state = model(ids[:, :2])  # shorter than d_conv
        steps = [logits]
        for t in range(2, 12):
            step, state = model(ids[:, t : t + 1], state)
            steps.append(step)
    assert full.shape == (3, 12, ODD.vocab_size)
    assert_close_to_reference("logits", torch.cat(steps, dim=1), full, F32)
    _assert_states_close("final", state, full_state)


@pytest.mark.parametrize(
    "chunks",
    [(1, 2, 3, 57), (5, 1, 1, 1, 55), (3, 3, 3, 54), (62, 1), (1,) * 9 + (54,)],
    ids=["1-2-3-57", "5-1-1-1-55", "3x3-54", "62-1", "9x1-54"],
)
def test_chunked_prefill_equals_one_piece(tiny, chunks):
    """Uneven chunks, including chunks shorter than d_conv=4 and single-token chunks (which take
    the decode path), continue exactly where the previous chunk stopped."""
    ids = _ids(2, sum(chunks), seed=len(chunks))
    with torch.no_grad():
        full, full_state = tiny(ids)
        state, pieces, start = None, [], 0
        for n in chunks:
            logits, state = tiny(ids[:, start : start + n], state)
            pieces.append(logits)
            start += n
    assert_close_to_reference("logits", torch.cat(pieces, dim=1), full, F32)
    _assert_states_close("final", state, full_state)


def test_chunked_prefill_then_decode_odd_config():
    model = MambaLM.from_config(dataclasses.replace(ODD, d_conv=5)).eval()
    ids = _ids(1, 30, vocab=ODD.vocab_size, seed=5)
    with torch.no_grad():
        full, full_state = model(ids)
        state, pieces, start = None, [], 0
        for n in (2, 3, 11, 1, 1, 6, 1, 1, 1, 1, 1, 1):
            logits, state = model(ids[:, start : start + n], state)
            pieces.append(logits)
            start += n
    assert start == 30
    assert_close_to_reference("logits", torch.cat(pieces, dim=1), full, F32)
    _assert_states_close("final", state, full_state)


@pytest.mark.parametrize("L", [1, 2, 3, 4, 7], ids=lambda L: f"L{L}")
def test_conv_state_is_the_last_d_conv_inputs_left_padded(tiny, L):
    ids = _ids(2, L, seed=11)
    mixer = tiny.layers[0].mixer
    with torch.no_grad():
        _, state = tiny(ids)
        x = mixer.in_proj(tiny.layers[0].norm(tiny.embedding(ids))).transpose(1, 2)
        x = x[:, : TINY.d_inner]  # the conv input (the x half of in_proj)
    expected = torch.nn.functional.pad(x, (max(TINY.d_conv - L, 0), 0))[:, :, -TINY.d_conv :]
    torch.testing.assert_close(state.conv_states[0], expected)


def test_forward_does_not_modify_the_given_state(tiny):
    ids = _ids(2, 10)
    with torch.no_grad():
        _, state = tiny(ids[:, :6])
        saved = [t.clone() for t in (*state.conv_states, *state.ssm_states)]
        tiny(ids[:, 6:7], state)  # decode
        tiny(ids[:, 6:], state)  # chunk
    for before, after in zip(saved, (*state.conv_states, *state.ssm_states)):
        assert torch.equal(before, after)


def test_reference_impl_decodes_like_the_kernel(tiny):
    ref_model = MambaLM.from_config(TINY, impl="reference").eval()
    ids = _ids(2, 20, seed=2)
    with torch.no_grad():
        _, state = tiny(ids[:, :19])
        _, ref_state = ref_model(ids[:, :19])
        step, next_state = tiny(ids[:, 19:], state)
        ref_step, ref_next = ref_model(ids[:, 19:], ref_state)
    assert_close_to_reference("decode logits", step, ref_step, F32)
    _assert_states_close("decode", next_state, ref_next)


def test_bfloat16_decode_matches_bfloat16_forward():
    model = MambaLM.from_config(TINY).eval().bfloat16()
    ids = _ids(2, 24, seed=4)
    with torch.no_grad():
        full, _ = model(ids)
        logits, state = model(ids[:, :20])
        steps = [logits]
        for t in range(20, 24):
            step, state = model(ids[:, t : t + 1], state)
            steps.append(step)
    assert_close_to_reference("bf16 logits", torch.cat(steps, dim=1), full, torch.bfloat16)
