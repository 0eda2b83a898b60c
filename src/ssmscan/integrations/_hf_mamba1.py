"""transformers' Mamba-1 mixers (Mamba, FalconMamba, Jamba, Zamba) computing on ssmscan ops.

Each ``Ssmscan*Mixer`` subclasses transformers' mixer (same parameters and buffers) and replaces
only ``forward``: the same projections, norms and head splits as transformers' torch path, with
the convolution and the scan going through the cache protocol of ``_hf_cache`` and the scan
itself through ``ssmscan.selective_scan`` / ``ssmscan::selective_state_update``. A mixer is
created only by ``use_ssmscan``, which switches the class of an existing module.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache
from transformers.integrations.accelerate import force_accelerate_hooks
from transformers.models.falcon_mamba.modeling_falcon_mamba import FalconMambaMixer
from transformers.models.jamba.modeling_jamba import JambaMambaMixer
from transformers.models.mamba.modeling_mamba import MambaMixer
from transformers.models.zamba.modeling_zamba import ZambaMambaMixer

from ssmscan.integrations._hf_cache import causal_conv, mask_padding, recurrent_states_to_keep
from ssmscan.ops.selective_scan.api import Impl, selective_scan
from ssmscan.ops.selective_state_update import op as _ssu_op  # noqa: F401  (registers the op)
from ssmscan.ops.selective_state_update.api import selective_state_update


def selective_scan_with_cache(
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
    state_shape: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """The mixer's selective scan (softplus on ``dt + dt_bias``), following the cache protocol.

    The cached recurrent state is (batch, dim, N), or ``state_shape`` with the same elements in
    that order (Zamba keeps (batch, heads, head_dim, N)); it is read and written in that shape.

    Args:
        mixer: the mixer (``layer_idx``).
        cache: the model's cache or None.
        x: (batch, dim, L) scan input; gate: (batch, dim, L); dt: (batch, dim, L) before bias.
        A: (dim, N) float32; D: (dim,) float32; dt_bias: (dim,) float32 or None.
        B, C: (batch, N, L) or grouped (batch, G, N, L).
        impl: the ``impl`` passed to ``ssmscan.selective_scan``.
        state_shape: the shape the family caches its recurrent state in; None: (batch, dim, N).

    Returns:
        (batch, dim, L) gated scan output in ``x``'s dtype.
    """
    layer_idx = mixer.layer_idx
    batch, dim, seq_len = x.shape
    state = cache.get_recurrent_state(layer_idx, state_idx=0) if cache is not None else None
    shape = state_shape if state_shape is not None else (batch, dim, A.shape[-1])
    in_place = state is not None and state.is_contiguous()  # then the reshape below is a view
    if state is not None:
        state = state.reshape(batch, dim, -1)
    step = torch.ops.ssmscan.selective_state_update
    if cache is not None and state is not None and seq_len == 1:
        if in_place and state.dtype == torch.float32 and not cache.is_recording_past(layer_idx):
            # nothing keeps the previous state: the step writes the cached tensor in place
            # (``state`` is a view of it), no copy of the state
            # plain tensors without grad (a Parameter requires grad even under no_grad): the
            # eager step then runs its kernel directly, without the op's dispatch
            detach = not torch.is_grad_enabled()

            def plain(t: torch.Tensor) -> torch.Tensor:
                return t.detach() if detach else t

            bias = plain(dt_bias) if dt_bias is not None else None
            return selective_state_update(
                state,
                plain(x[..., 0]),
                plain(dt[..., 0]),
                plain(A),
                plain(B[..., 0]),
                plain(C[..., 0]),
                plain(D),
                plain(gate[..., 0]),
                bias,
                dt_softplus=True,
            )[..., None]
        out, new_state = step(
            state, x[..., 0], dt[..., 0], A, B[..., 0], C[..., 0], D, gate[..., 0], dt_bias, True
        )
        cache.update_recurrent_state(new_state.reshape(shape), layer_idx)
        return out[..., None]

    keep = recurrent_states_to_keep(cache, layer_idx) if cache is not None else 0
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
        if states:
            # Cache.update_recurrent_state is annotated Tensor; its layers take a list (5.25)
            history = [s.reshape(shape) for s in states]
            cache.update_recurrent_state(history, layer_idx)  # type: ignore[arg-type]
        elif last is not None:
            cache.update_recurrent_state(last.reshape(shape), layer_idx)
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)


def _mamba1_forward(
    mixer: Any,
    hidden_states: torch.Tensor,
    cache: Cache | None,
    attention_mask: torch.Tensor | None,
    norms: bool,
    quantized_dt_proj: bool,
) -> torch.Tensor:
    """The Mamba / FalconMamba / Jamba mixer: in_proj, conv, x_proj, [RMS norms on dt, B, C],
    dt_proj, scan, out_proj; hidden_states (batch, L, hidden) -> (batch, L, hidden)."""
    dtype = hidden_states.dtype
    hidden_states = mask_padding(hidden_states, attention_mask)
    x, gate = mixer.in_proj(hidden_states).transpose(1, 2).chunk(2, dim=1)  # (batch, d, L)
    x = causal_conv(mixer, x, cache, dtype)
    x = mask_padding(x.transpose(1, 2), attention_mask)  # (batch, L, d)
    rank, n = mixer.time_step_rank, mixer.ssm_state_size
    dt, B, C = torch.split(mixer.x_proj(x), [rank, n, n], dim=-1)
    if norms:
        dt, B, C = mixer.dt_layernorm(dt), mixer.b_layernorm(B), mixer.c_layernorm(C)
    if quantized_dt_proj and hasattr(mixer.config, "_is_quantized"):
        # transformers calls the (quantized) module and takes its bias back off
        dt = (mixer.dt_proj(dt) - mixer.dt_proj.bias).transpose(1, 2)
    else:
        dt = mixer.dt_proj.weight @ dt.transpose(1, 2)  # (batch, d, L)
    out = selective_scan_with_cache(
        mixer,
        cache,
        x.transpose(1, 2),
        dt,
        -torch.exp(mixer.A_log.float()),
        B.transpose(1, 2),
        C.transpose(1, 2),
        mixer.D.float(),
        gate,
        mixer.dt_proj.bias.float(),
        mixer.ssmscan_impl,
    )
    return mixer.out_proj(out.transpose(1, 2).to(dtype))


class _Mamba1Forward:
    """The forward of the mixers that share transformers' Mamba projections (Mamba, FalconMamba,
    Jamba); a subclass names whether it has RMS norms on dt, B, C and a quantizable ``dt_proj``.
    ``ssmscan_impl`` is the ``impl`` passed to ``ssmscan.selective_scan``."""

    ssmscan_impl: Impl = "auto"
    _norms: bool = False
    _quantized_dt_proj: bool = False

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
        return _mamba1_forward(
            self, hidden_states, cache, attention_mask, self._norms, self._quantized_dt_proj
        )


class SsmscanMambaMixer(_Mamba1Forward, MambaMixer):
    """transformers' ``MambaMixer`` computing on ssmscan ops; created only by ``use_ssmscan``."""


class SsmscanFalconMambaMixer(_Mamba1Forward, FalconMambaMixer):
    """transformers' ``FalconMambaMixer`` (weightless RMS norms on dt, B, C) on ssmscan ops."""

    _norms = _quantized_dt_proj = True


class SsmscanJambaMambaMixer(_Mamba1Forward, JambaMambaMixer):
    """transformers' ``JambaMambaMixer`` (RMS norms with weights on dt, B, C) on ssmscan ops."""

    _norms = _quantized_dt_proj = True


class SsmscanZambaMambaMixer(ZambaMambaMixer):
    """transformers' ``ZambaMambaMixer`` on ssmscan ops.

    Zamba splits the inner channels into ``n_mamba_heads`` heads with their own ``x_proj`` /
    ``dt_proj`` weights and B, C; the heads' scans are independent, so they run as one grouped
    ``selective_scan`` (group = head). The recurrent state is cached as transformers keeps it,
    (batch, heads, head_dim, N).
    """

    ssmscan_impl: Impl = "auto"

    @force_accelerate_hooks("conv1d")
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
        batch, seq_len, _ = hidden_states.shape
        dtype = hidden_states.dtype
        heads, head_dim = self.n_mamba_heads, self.mamba_head_dim
        dim, rank, n = self.intermediate_size, int(self.time_step_rank), self.ssm_state_size
        hidden_states = mask_padding(hidden_states, attention_mask)
        projected = self.in_proj(hidden_states).transpose(1, 2)  # (batch, 2 d, L)
        # Zamba interleaves the conv input and the gate channel by channel
        x, gate = projected.view(batch, dim, 2, seq_len).unbind(dim=2)  # (batch, d, L) each
        x = causal_conv(self, x.contiguous(), cache, dtype)
        x = mask_padding(x.transpose(1, 2), attention_mask).transpose(1, 2)  # (batch, d, L)
        per_head = x.reshape(batch, heads, head_dim, seq_len).transpose(0, 1)  # (H, b, hd, L)
        params = (self.x_proj_weight[:, None] @ per_head).transpose(-1, -2)  # (H, b, L, R+2N)
        dt, B, C = torch.split(params, [rank, n, n], dim=-1)
        dt = self.dt_proj_weight[:, None] @ dt.transpose(-1, -2)  # (H, b, hd, L)
        out = selective_scan_with_cache(
            self,
            cache,
            x,
            dt.transpose(0, 1).reshape(batch, dim, seq_len),
            -torch.exp(self.A_log.float()).reshape(dim, n),
            B.permute(1, 0, 3, 2),  # (batch, H, N, L): one group per head
            C.permute(1, 0, 3, 2),
            self.D.float().reshape(dim),
            gate,
            self.dt_proj_bias.float().reshape(dim),
            self.ssmscan_impl,
            state_shape=(batch, heads, head_dim, n),
        )
        return self.out_proj(out.transpose(1, 2).to(dtype))
