"""The transformers cache protocol for linear-attention (SSM) layers, as the ssmscan mixers use it.

Shared by every adapted family: padding masks, the causal depthwise conv with its cached window,
and the features of the cache that differ between transformers releases, each detected on the
cache object (``increase_count``, ``get_recurrent_states_to_keep``: 5.25).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache

from ssmscan.models.inference import fused_inference
from ssmscan.ops.conv1d_step.api import conv1d_step_


def mask_padding(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Zero padded positions: hidden (batch, L, d), mask (batch, L) (transformers' helper)."""
    if attention_mask is None:
        return hidden_states
    return (hidden_states * attention_mask[:, :, None]).to(hidden_states.dtype)


def recurrent_states_to_keep(cache: Cache, layer_idx: int) -> int:
    """How many per-token recurrent states the cache asks a multi-token forward for (0: only the
    last). Caches without the request (transformers 5.24) never roll a recurrent state back."""
    ask = getattr(cache, "get_recurrent_states_to_keep", None)
    return 0 if ask is None else int(ask(layer_idx) or 0)


def causal_conv(
    mixer: Any, x: torch.Tensor, cache: Cache | None, dtype: torch.dtype
) -> torch.Tensor:
    """The mixer's causal depthwise conv and activation, reading and updating ``cache``.

    Args:
        mixer: a transformers Mamba-1 or Mamba-2 mixer (``conv1d``, ``act``, ``layer_idx``).
        x: (batch, dim, L) conv input.
        cache: the model's cache or None.
        dtype: dtype of the result (the mixer's input dtype).

    Returns:
        (batch, dim, L) activated conv output in ``dtype``.
    """
    weight, bias = mixer.conv1d.weight, mixer.conv1d.bias  # (dim, 1, K), (dim,) or None
    kernel = weight.shape[-1]
    step = _decode_step_in_place(mixer, x, cache, dtype)
    if step is not None:
        return step
    full = x
    if cache is not None:
        full = cache.update_conv_state(x, mixer.layer_idx, state_idx=0, conv_kernel_size=kernel)
    out = F.conv1d(full.to(weight.dtype), weight, bias, padding=kernel - 1, groups=x.shape[1])
    out = out[:, :, : full.shape[-1]][:, :, -x.shape[-1] :]
    return mixer.act(out).to(dtype)


def causal_conv_tokens(
    mixer: Any, x: torch.Tensor, cache: Cache | None, dtype: torch.dtype
) -> torch.Tensor:
    """``causal_conv`` on token-major input: x (batch, L, dim) -> (batch, L, dim) token-major.

    A chunk's conv runs as K shifted multiply-adds over the token rows (``x`` may be a column
    slice of a projection, its rows strided), so neither the input nor the output is transposed
    and copied, and the output's rows are contiguous for the ops that read them next (the scan
    reads x, B and C a token at a time). The cache sees the (batch, dim, L) views
    ``causal_conv`` passes it; the values are the same within rounding.

    Args:
        mixer: as ``causal_conv``'s.
        x: (batch, L, dim) conv input, last dimension contiguous or not.
        cache: the model's cache or None.
        dtype: dtype of the result.

    Returns:
        (batch, L, dim) activated conv output in ``dtype``.
    """
    seq_len = x.shape[1]
    if not isinstance(seq_len, int):
        # a symbolic length (export, dynamic compile): the shifts' bounds would guard it
        # (L >= K, L != K); conv1d keeps it free
        return causal_conv(mixer, x.transpose(1, 2), cache, dtype).transpose(1, 2)
    weight, bias = mixer.conv1d.weight, mixer.conv1d.bias
    kernel = weight.shape[-1]
    step = _decode_step_in_place(mixer, x.transpose(1, 2), cache, dtype)
    if step is not None:
        return step.transpose(1, 2)
    full = x
    if cache is not None:
        channels = cache.update_conv_state(
            x.transpose(1, 2), mixer.layer_idx, state_idx=0, conv_kernel_size=kernel
        )
        full = channels.transpose(1, 2)  # (batch, cached + L, dim)
    full = full.to(weight.dtype)
    total, start = full.shape[1], full.shape[1] - seq_len
    w = weight[:, 0, :]  # (dim, K)
    # out[t] = bias + sum_k w[:, k] x[t - (K - 1 - k)], zero before the first row
    last = full[:, start:]
    out = last * w[:, -1] if bias is None else torch.addcmul(bias, last, w[:, -1])
    for k in range(kernel - 1):
        shift = kernel - 1 - k
        first = max(start, shift)
        if first < total:
            out[:, first - start :].addcmul_(full[:, first - shift : total - shift], w[:, k])
    return mixer.act(out).to(dtype)


def _is_silu(act: Any) -> bool:
    """``torch.nn.SiLU`` or transformers' ``SiLUActivation`` (``ACT2FN["silu"]`` in 5.25: a
    module whose forward is ``F.silu``), exactly those types."""
    return type(act) is torch.nn.SiLU or (
        type(act).__name__ == "SiLUActivation"
        and type(act).__module__ == "transformers.activations"
    )


def _decode_step_in_place(
    mixer: Any, x: torch.Tensor, cache: Cache | None, dtype: torch.dtype
) -> torch.Tensor | None:
    """One token (x (batch, dim, 1)) on a cache holding a conv state and recording no past: the
    window shifted in place and the activated conv output (batch, dim, 1) in ``dtype``; None
    when the call is not such a step (nothing touched). On CUDA without gradients and with a
    SiLU activation, one kernel (``conv1d_step_``: shift, product, bias and SiLU, the state
    written in place, float32 sums; Note [fused inference]) instead of about seven."""
    layer_idx, weight, bias = mixer.layer_idx, mixer.conv1d.weight, mixer.conv1d.bias
    if cache is None or x.shape[-1] != 1 or cache.is_recording_past(layer_idx):
        return None
    conv_state = cache.get_conv_state(layer_idx, state_idx=0)
    if conv_state is None:
        return None
    # One token, in place; the cache is not told, so advance its token count (5.25).
    increase_count = getattr(cache, "increase_count", None)
    if increase_count is not None:
        increase_count(layer_idx, 0)
    w = weight[:, 0, :]  # (dim, K)
    if _is_silu(mixer.act) and fused_inference(x, conv_state, w, bias):
        return conv1d_step_(x[:, :, 0], conv_state, w, bias, True)[:, :, None].to(dtype)
    window = torch.cat([conv_state[:, :, 1:], x.to(conv_state.dtype)], dim=-1)
    conv_state.copy_(window)
    out = (window.to(weight.dtype) * w).sum(-1, keepdim=True)
    if bias is not None:
        out = out + bias[:, None]
    return mixer.act(out).to(dtype)
