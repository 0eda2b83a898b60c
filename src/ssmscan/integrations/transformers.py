"""Hugging Face transformers: run a ``MambaForCausalLM`` / ``MambaModel`` on ssmscan ops.

How transformers (5.x, tested with 5.24) runs a Mamba mixer: ``MambaMixer.forward(hidden_states,
cache, attention_mask)`` is one function that calls module-level helpers (``mamba_selective_scan``,
``mamba_selective_state_update``, ``causal_conv1d_fn``, ``causal_conv1d_update``) which the hub
``kernels`` package may replace by mamba-ssm's CUDA kernels; without them they are a sequential
Python loop over time (a graph break-free but O(L)-node trace). The decode state lives in a
``DynamicCache`` whose per-layer ``LinearAttentionLayer`` holds the conv and recurrent states
(``get_conv_state`` / ``update_conv_state`` / ``get_recurrent_state`` / ``update_recurrent_state``);
``get_*`` return None until the layer has seen a first forward.

``use_ssmscan(model)`` switches every mixer's class to ``SsmscanMambaMixer``, a subclass whose
``forward`` is the same computation on ``ssmscan.selective_scan`` (prefill, one fused op, returning
the final state) and ``ssmscan::selective_state_update`` (decode), reading and writing the same
cache. Parameters, buffers and the state dict are untouched (no weights are copied), so the model
still saves, loads and generates as before.

One deliberate difference: when a cache already holds a state and a multi-token chunk arrives
(chunked prefill, assisted decoding), transformers' torch path restarts the SSM from zero (its
"initial hidden state is not supported"); the ssmscan mixer continues from the cached state, which
is what the recurrence means. For ordinary forwards and ``generate`` the two agree.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache
from transformers.integrations.accelerate import force_accelerate_hooks
from transformers.models.mamba.modeling_mamba import MambaForCausalLM, MambaMixer, MambaModel

from ssmscan.ops.selective_scan.api import Impl, selective_scan
from ssmscan.ops.selective_state_update import op as _ssu_op  # noqa: F401  (registers the op)

_IMPLS = ("auto", "cpu", "triton", "reference")


def _mask_padding(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Zero padded positions: hidden (batch, L, d), mask (batch, L) (transformers' helper)."""
    if attention_mask is None:
        return hidden_states
    return (hidden_states * attention_mask[:, :, None]).to(hidden_states.dtype)


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
        seq_len, dtype = hidden_states.shape[1], hidden_states.dtype
        conv_state = recurrent_state = None
        if cache is not None:
            conv_state = cache.get_conv_state(self.layer_idx, state_idx=0)
            recurrent_state = cache.get_recurrent_state(self.layer_idx, state_idx=0)

        hidden_states = _mask_padding(hidden_states, attention_mask)
        x, gate = self.in_proj(hidden_states).transpose(1, 2).chunk(2, dim=1)  # (batch, d, L)

        kernel = self.conv_kernel_size
        weight, bias = self.conv1d.weight, self.conv1d.bias  # (d, 1, K), (d,) or None
        if (
            cache is not None
            and conv_state is not None
            and seq_len == 1
            and not cache.is_recording_past(self.layer_idx)
        ):
            window = torch.cat([conv_state[:, :, 1:], x.to(conv_state.dtype)], dim=-1)
            conv_state.copy_(window)
            x = (window.to(weight.dtype) * weight[:, 0, :]).sum(-1, keepdim=True)
            if bias is not None:
                x = x + bias[:, None]
        else:
            full = x
            if cache is not None:
                full = cache.update_conv_state(x, self.layer_idx, conv_kernel_size=kernel)
            x = F.conv1d(full.to(weight.dtype), weight, bias, padding=kernel - 1, groups=x.shape[1])
            x = x[:, :, : full.shape[-1]][:, :, -seq_len:]
        x = self.act(x).to(dtype)

        x = _mask_padding(x.transpose(1, 2), attention_mask)  # (batch, L, d)
        dt, B, C = torch.split(
            self.x_proj(x), [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1
        )
        dt = self.dt_proj.weight @ dt.transpose(1, 2)  # (batch, d, L)
        A = -torch.exp(self.A_log.float())
        dt_bias = self.dt_proj.bias.float()

        if recurrent_state is not None and seq_len == 1:
            out, new_state = torch.ops.ssmscan.selective_state_update(
                recurrent_state,
                x[:, 0],
                dt[:, :, 0],
                A,
                B[:, 0],
                C[:, 0],
                self.D.float(),
                gate[:, :, 0],
                dt_bias,
                True,
            )
            recurrent_state.copy_(new_state)
            out = out[:, :, None]
        else:
            initial = recurrent_state.float() if recurrent_state is not None else None
            out, last_state = selective_scan(
                x.transpose(1, 2),
                dt,
                A,
                B.transpose(1, 2).contiguous(),
                C.transpose(1, 2).contiguous(),
                D=self.D.float(),
                z=gate,
                delta_bias=dt_bias,
                delta_softplus=True,
                return_last_state=True,
                initial_state=initial,
                impl=self.ssmscan_impl,
            )
            if cache is not None:
                cache.update_recurrent_state(last_state, self.layer_idx)
        return self.out_proj(out.transpose(1, 2).to(dtype))


def use_ssmscan(
    model: MambaForCausalLM | MambaModel, impl: Impl = "auto"
) -> MambaForCausalLM | MambaModel:
    """Switch a transformers Mamba model's mixers to ssmscan ops, in place, without copying weights.

    Every ``MambaMixer`` becomes an ``SsmscanMambaMixer`` (same parameters, same cache); prefill
    runs one ``ssmscan.selective_scan`` per layer, decode one ``selective_state_update``. The model
    works with ``generate()`` and with ``torch.compile(fullgraph=True)``. Calling it again only
    updates ``impl``.

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
