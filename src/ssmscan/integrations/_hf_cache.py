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
    layer_idx, seq_len = mixer.layer_idx, x.shape[-1]
    weight, bias = mixer.conv1d.weight, mixer.conv1d.bias  # (dim, 1, K), (dim,) or None
    kernel = weight.shape[-1]
    conv_state = cache.get_conv_state(layer_idx, state_idx=0) if cache is not None else None
    if (
        cache is not None
        and conv_state is not None
        and seq_len == 1
        and not cache.is_recording_past(layer_idx)
    ):
        # One token, in place; the cache is not told, so advance its token count (5.25).
        increase_count = getattr(cache, "increase_count", None)
        if increase_count is not None:
            increase_count(layer_idx, 0)
        window = torch.cat([conv_state[:, :, 1:], x.to(conv_state.dtype)], dim=-1)
        conv_state.copy_(window)
        out = (window.to(weight.dtype) * weight[:, 0, :]).sum(-1, keepdim=True)
        if bias is not None:
            out = out + bias[:, None]
    else:
        full = x
        if cache is not None:
            full = cache.update_conv_state(x, layer_idx, state_idx=0, conv_kernel_size=kernel)
        out = F.conv1d(full.to(weight.dtype), weight, bias, padding=kernel - 1, groups=x.shape[1])
        out = out[:, :, : full.shape[-1]][:, :, -seq_len:]
    return mixer.act(out).to(dtype)
