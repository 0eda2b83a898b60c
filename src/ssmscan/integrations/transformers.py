"""Hugging Face transformers: run transformers' Mamba models on ssmscan ops.

How transformers (5.x; 5.24 and 5.25 are tested) runs a Mamba-1 mixer: ``forward(hidden_states,
cache, attention_mask)`` runs a causal depthwise convolution and a selective scan through
module-level helpers that the hub ``kernels`` package may replace by mamba-ssm's CUDA kernels;
without them they are a sequential Python loop over time. The decode state lives in a
``DynamicCache`` whose per-layer ``LinearAttentionLayer`` holds the conv and recurrent states
(``get_conv_state`` / ``update_conv_state`` / ``get_recurrent_state`` /
``update_recurrent_state``); ``get_*`` return None until the layer has seen a first forward.

``use_ssmscan(model)`` switches every supported mixer's class to an ssmscan subclass whose
``forward`` is the same computation on ``ssmscan.selective_scan`` (a multi-token chunk, one fused
op continuing from the cached state) and ``ssmscan::selective_state_update`` (one token), reading
and writing the same cache through its public methods. Parameters, buffers and the state dict are
untouched (no weights are copied), so the model still saves, loads and generates as before.

The cache protocol followed, feature by feature (each detected on the cache object, so 5.24 and
5.25 both work):

- A one-token decode on a cache that is not recording its past updates the conv state in place
  and advances the cache's token count with ``cache.increase_count(layer_idx, 0)`` (5.25), so
  ``get_seq_length()`` stays right and a continued ``generate`` feeds only new tokens.
- The new recurrent state is handed to ``cache.update_recurrent_state``, never written into the
  cached tensor directly, so a cache recording its past (assisted decoding) keeps the previous
  state in its history and ``crop`` can roll rejected draft tokens back.
- A multi-token chunk on a recording cache (5.25: ``get_recurrent_states_to_keep(layer_idx)``
  returns k > 0) passes ``update_recurrent_state`` the list of the per-token states of its last
  ``min(k + 1, L)`` tokens: the chunk's head runs as one ``selective_scan``, its tail token by
  token with ``selective_state_update``. The layer rebuilds the state ``j`` tokens back as
  ``[previous state] + list[:-1]`` indexed at ``-j``; with ``k + 1`` states every rollback of up
  to ``k`` tokens (the most the cache was told to allow) lands on the right state even when the
  chunk is longer than ``k``. transformers' own path passes ``min(k, L)`` states, so rejecting a
  whole ``k``-token draft (chunk of ``k + 1`` tokens) restores the state from before the chunk.

One deliberate difference: when a cache already holds a state and a multi-token chunk arrives
(chunked prefill, assisted decoding), transformers' torch path scans the chunk's head from a zero
state (its "initial hidden state is not supported"); the ssmscan mixer continues from the cached
state, which is what the recurrence means. For ordinary forwards and ``generate`` the two agree.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache
from transformers.integrations.accelerate import force_accelerate_hooks
from transformers.models.mamba.modeling_mamba import MambaMixer

from ssmscan.ops.selective_scan.api import Impl, selective_scan
from ssmscan.ops.selective_state_update import op as _ssu_op  # noqa: F401  (registers the op)

_IMPLS = ("auto", "cpu", "triton", "reference")


def _mask_padding(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Zero padded positions: hidden (batch, L, d), mask (batch, L) (transformers' helper)."""
    if attention_mask is None:
        return hidden_states
    return (hidden_states * attention_mask[:, :, None]).to(hidden_states.dtype)


def _recurrent_states_to_keep(cache: Cache, layer_idx: int) -> int:
    """How many per-token recurrent states the cache asks a multi-token forward for (0: only the
    last). Caches without the request (transformers 5.24) never roll a recurrent state back."""
    ask = getattr(cache, "get_recurrent_states_to_keep", None)
    return 0 if ask is None else int(ask(layer_idx) or 0)


def _causal_conv(
    mixer: Any, x: torch.Tensor, cache: Cache | None, dtype: torch.dtype
) -> torch.Tensor:
    """The mixer's causal depthwise conv and activation, reading and updating ``cache``.

    Args:
        mixer: a transformers Mamba-1 mixer (``conv1d``, ``act``, ``layer_idx``).
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


def _selective_scan_with_cache(
    mixer: Any,
    cache: Cache | None,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    gate: torch.Tensor,
    dt_bias: torch.Tensor | None,
    impl: Impl,
) -> torch.Tensor:
    """The mixer's selective scan (softplus on ``dt + dt_bias``), following the cache protocol.

    The cached recurrent state may have any shape with ``batch * dim * N`` elements in the
    order (batch, dim, N) (Zamba keeps (batch, heads, head_dim, N)); it is read and written in
    that shape.

    Args:
        mixer: the mixer (``layer_idx``).
        cache: the model's cache or None.
        x: (batch, dim, L) scan input; gate: (batch, dim, L); dt: (batch, dim, L) before bias.
        A: (dim, N) float32; D: (dim,) float32; dt_bias: (dim,) float32 or None.
        B, C: (batch, N, L) or grouped (batch, G, N, L).
        impl: the ``impl`` passed to ``ssmscan.selective_scan``.

    Returns:
        (batch, dim, L) gated scan output in ``x``'s dtype.
    """
    layer_idx = mixer.layer_idx
    batch, dim, seq_len = x.shape
    state = cache.get_recurrent_state(layer_idx, state_idx=0) if cache is not None else None
    stored_shape = state.shape if state is not None else None
    if state is not None:
        state = state.reshape(batch, dim, -1)
    step = torch.ops.ssmscan.selective_state_update
    if cache is not None and state is not None and seq_len == 1:
        out, new_state = step(
            state, x[..., 0], dt[..., 0], A, B[..., 0], C[..., 0], D, gate[..., 0], dt_bias, True
        )
        cache.update_recurrent_state(new_state.reshape(stored_shape), layer_idx)
        return out[..., None]

    keep = _recurrent_states_to_keep(cache, layer_idx) if cache is not None else 0
    n_steps = min(keep + 1, seq_len) if keep > 0 else 0
    head = seq_len - n_steps
    outs: list[torch.Tensor] = []
    last = state.float() if state is not None else None
    if head > 0:
        out, last = selective_scan(
            x[..., :head],
            dt[..., :head],
            A,
            B[..., :head].contiguous(),
            C[..., :head].contiguous(),
            D=D,
            z=gate[..., :head],
            delta_bias=dt_bias,
            delta_softplus=True,
            return_last_state=True,
            initial_state=last,
            impl=impl,
        )
        outs.append(out)
    states: list[torch.Tensor] = []
    if n_steps > 0:
        if last is None:
            last = x.new_zeros((batch, dim, A.shape[-1]), dtype=torch.float32)
        for t in range(head, seq_len):
            y, last = step(
                last, x[..., t], dt[..., t], A, B[..., t], C[..., t], D, gate[..., t], dt_bias, True
            )
            outs.append(y[..., None])
            states.append(last)
    if cache is not None:
        shape = stored_shape if stored_shape is not None else (batch, dim, A.shape[-1])
        if states:
            # Cache.update_recurrent_state is annotated Tensor; its layers take a list (5.25)
            history = [s.reshape(shape) for s in states]
            cache.update_recurrent_state(history, layer_idx)  # type: ignore[arg-type]
        elif last is not None:
            cache.update_recurrent_state(last.reshape(shape), layer_idx)
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)


class SsmscanMambaMixer(MambaMixer):
    """transformers' ``MambaMixer`` computing on ssmscan ops; created only by ``use_ssmscan``.

    ``ssmscan_impl`` is the ``impl`` passed to ``ssmscan.selective_scan``.
    """

    ssmscan_impl: Impl = "auto"

    @force_accelerate_hooks(["conv1d", "dt_proj"])
    def forward(
        self,
        hidden_states: torch.Tensor,
        cache: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Any,  # transformers passes extra keyword arguments through; ignored as upstream
    ) -> torch.Tensor:
        """hidden_states (batch, L, hidden) -> (batch, L, hidden); reads/updates ``cache``."""
        if cache is None:
            cache = kwargs.get("cache_params")  # the deprecated name of ``cache``
        dtype = hidden_states.dtype
        hidden_states = _mask_padding(hidden_states, attention_mask)
        x, gate = self.in_proj(hidden_states).transpose(1, 2).chunk(2, dim=1)  # (batch, d, L)
        x = _causal_conv(self, x, cache, dtype)
        x = _mask_padding(x.transpose(1, 2), attention_mask)  # (batch, L, d)
        dt, B, C = torch.split(
            self.x_proj(x), [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1
        )
        dt = self.dt_proj.weight @ dt.transpose(1, 2)  # (batch, d, L)
        out = _selective_scan_with_cache(
            self,
            cache,
            x.transpose(1, 2),
            dt,
            -torch.exp(self.A_log.float()),
            B.transpose(1, 2),
            C.transpose(1, 2),
            self.D.float(),
            gate,
            self.dt_proj.bias.float(),
            self.ssmscan_impl,
        )
        return self.out_proj(out.transpose(1, 2).to(dtype))


def use_ssmscan(model: torch.nn.Module, impl: Impl = "auto") -> torch.nn.Module:
    """Switch a transformers Mamba model's mixers to ssmscan ops, in place, without copying weights.

    Every ``MambaMixer`` becomes an ``SsmscanMambaMixer`` (same parameters, same cache); a
    multi-token chunk runs one ``ssmscan.selective_scan`` per layer, a decode step one
    ``selective_state_update``. The model works with ``generate()`` (greedy, sampling, beam
    search, continued and assisted generation) and with ``torch.compile(fullgraph=True)``.
    Calling it again only updates ``impl``.

    Args:
        model: a ``transformers.MambaForCausalLM`` or ``transformers.MambaModel``.
        impl: scan implementation: ``"auto"`` (the kernel for the device), ``"cpu"``,
            ``"triton"`` or ``"reference"``.

    Returns:
        The same model object.

    Raises:
        TypeError: ``model`` is not a transformers Mamba model.

    Example:
        >>> import torch, transformers
        >>> from ssmscan.integrations.transformers import use_ssmscan
        >>> cfg = transformers.MambaConfig(vocab_size=64, hidden_size=32, state_size=8,
        ...     num_hidden_layers=2)
        >>> model = use_ssmscan(transformers.MambaForCausalLM(cfg).eval())
        >>> model(torch.tensor([[1, 2, 3]])).logits.shape
        torch.Size([1, 3, 64])
    """
    from transformers.models.mamba.modeling_mamba import MambaForCausalLM, MambaModel

    if not isinstance(model, (MambaForCausalLM, MambaModel)):
        raise TypeError(
            "use_ssmscan takes a transformers MambaForCausalLM or MambaModel; got "
            f"{type(model).__module__}.{type(model).__qualname__}"
        )
    if impl not in _IMPLS:
        raise ValueError(f"impl must be one of {_IMPLS}; got {impl!r}")
    for module in model.modules():
        if isinstance(module, MambaMixer):
            if type(module) not in (MambaMixer, SsmscanMambaMixer):
                raise TypeError(
                    f"use_ssmscan supports transformers' MambaMixer; found the subclass "
                    f"{type(module).__qualname__}, whose forward it cannot vouch for"
                )
            module.__class__ = SsmscanMambaMixer
            cast(SsmscanMambaMixer, module).ssmscan_impl = impl  # the class was just switched
    return model
