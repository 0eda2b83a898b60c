"""transformers' Mamba-2 mixers (Mamba2, Bamba, GraniteMoeHybrid, NemotronH, FalconH1, Zamba2)
computing on ssmscan ops.

transformers 5.25 generates all six mixers from one modular source: the same ``in_proj`` split into
gate, conv input and dt, the same causal conv, the same SSD scan (``mamba2_scan_forward``) and a
gated RMS norm of the family's own class (``self.norm``). FalconH1 adds its multipliers
(``ssm_in_multiplier`` on the input, ``mup_vector`` on the projections) and an optional norm (a
plain ``silu`` gate without it). Each ``Ssmscan*`` subclass keeps the parameters, buffers and norm
module and replaces only ``forward``: the conv goes through ``_hf_cache``'s cache protocol, a
multi-token chunk through one ``ssmscan.ssd_scan`` continuing from the cached state, a decode step
through ``ssmscan::selective_state_update`` (Mamba-2 layout). A mixer is created only by
``use_ssmscan``, which switches the class of an existing module.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache
from transformers.integrations.accelerate import force_accelerate_hooks
from transformers.models.bamba.modeling_bamba import BambaMixer, BambaRMSNormGated
from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1Mixer
from transformers.models.granitemoehybrid.modeling_granitemoehybrid import (
    GraniteMoeHybridMambaLayer,
    GraniteMoeHybridRMSNormGated,
)
from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer, Mamba2RMSNormGated
from transformers.models.nemotron_h.modeling_nemotron_h import (
    NemotronHMamba2Mixer,
    NemotronHRMSNormGated,
)
from transformers.models.zamba2.modeling_zamba2 import Zamba2MambaMixer, Zamba2RMSNormGated

from ssmscan.integrations._hf_cache import (
    causal_conv_tokens,
    mask_padding,
    recurrent_states_to_keep,
)
from ssmscan.ops.selective_scan.api import Impl
from ssmscan.ops.selective_state_update import op as _ssu_op  # noqa: F401  (registers the op)
from ssmscan.ops.selective_state_update.api import selective_state_update
from ssmscan.ops.ssd_scan.api import ssd_scan


def _state_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def ssd_scan_with_cache(
    mixer: Any,
    cache: Cache | None,
    x: torch.Tensor,
    dt: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    impl: Impl,
) -> torch.Tensor:
    """The mixer's SSD scan (D skip, softplus on ``dt + dt_bias``), following the cache protocol.

    A multi-token chunk continues from the cached state (transformers' ``initial_states``) with
    ``dt`` clamped to ``mixer.time_step_limit``; one token on a cached state is one decode step
    (no clamp, as transformers' step). A recording cache asking for ``k`` states gets the
    per-token states of the last ``min(k + 1, L)`` tokens (see ``transformers.py``).

    Args:
        mixer: the mixer (``layer_idx``, ``A_log``, ``D``, ``dt_bias``, ``time_step_limit``).
        cache: the model's cache or None.
        x: (batch, L, nheads, headdim).
        dt: (batch, L, nheads) before bias and softplus, x's dtype.
        B, C: (batch, L, ngroups, dstate), x's dtype.
        impl: the ``impl`` passed to ``ssmscan.ssd_scan``.

    Returns:
        (batch, L, nheads, headdim) in x's dtype.
    """
    layer_idx = mixer.layer_idx
    batch, seq_len, heads, head_dim = x.shape
    n = B.shape[-1]
    sdt = _state_dtype(x)
    A = -torch.exp(mixer.A_log.to(sdt))
    D, dt_bias = mixer.D.to(sdt), mixer.dt_bias.to(sdt)
    if not torch.is_grad_enabled():
        # inference: the parameters as plain tensors (a Parameter requires grad even under
        # no_grad), so an eager decode step runs its kernel directly, without the op's dispatch
        D, dt_bias = D.detach(), dt_bias.detach()
    state = cache.get_recurrent_state(layer_idx, state_idx=0) if cache is not None else None
    op = torch.ops.ssmscan.selective_state_update

    def step_args(t: int) -> tuple[Any, ...]:
        """The arguments after the state of token t's decode step (Mamba-2 layout)."""
        return (
            x[:, t],
            dt[:, t, :, None].expand(-1, -1, head_dim),
            A[:, None, None].expand(-1, head_dim, n),
            B[:, t],
            C[:, t],
            D[:, None].expand(-1, head_dim),
            None,
            dt_bias[:, None].expand(-1, head_dim),
            True,
        )

    def step(s: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        return op(s, *step_args(t))

    if cache is not None and state is not None and seq_len == 1:
        if not cache.is_recording_past(layer_idx) and state.dtype == sdt:
            # nothing keeps the previous state: the step writes the cached tensor in place (no
            # copy of the state; ``update_recurrent_state`` would copy it onto itself)
            return selective_state_update(state, *step_args(0))[:, None]
        out, new_state = op(state, *step_args(0))
        cache.update_recurrent_state(new_state, layer_idx)
        return out[:, None]

    keep = recurrent_states_to_keep(cache, layer_idx) if cache is not None else 0
    n_steps = min(keep + 1, seq_len) if keep > 0 else 0
    head = seq_len - n_steps
    outs: list[torch.Tensor] = []
    last = state.to(sdt) if state is not None else None
    if head > 0:
        limit = mixer.time_step_limit
        scanned = ssd_scan(
            x[:, :head],
            dt[:, :head],
            A,
            B[:, :head],
            C[:, :head],
            D=D,
            dt_bias=dt_bias,
            initial_states=last,
            dt_softplus=True,
            dt_limit=(float(limit[0]), float(limit[1])),
            return_final_states=cache is not None,
            impl=impl,
        )
        if isinstance(scanned, tuple):
            scanned, last = scanned
        outs.append(scanned)
    states: list[torch.Tensor] = []
    if n_steps > 0:
        if last is None:
            last = x.new_zeros((batch, heads, head_dim, n), dtype=sdt)
        for t in range(head, seq_len):
            y, last = step(last, t)
            outs.append(y[:, None])
            states.append(last)
    if cache is not None:
        if states:
            # Cache.update_recurrent_state is annotated Tensor; its layers take a list (5.25)
            cache.update_recurrent_state(states, layer_idx)  # type: ignore[arg-type]
        elif last is not None:
            cache.update_recurrent_state(last, layer_idx)
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)


# transformers' gated RMS norms with the same forward: y * silu(gate), RMS-normalized per group
# of ``group_size`` channels (float32), times ``weight``
_GATED_NORMS = (
    Mamba2RMSNormGated,
    BambaRMSNormGated,
    GraniteMoeHybridRMSNormGated,
    NemotronHRMSNormGated,
    Zamba2RMSNormGated,
)


def _gated_rms_norm(norm: Any, y: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``norm(y, gate)`` of a ``_GATED_NORMS`` module for float32 y, gate (batch, L, d) under
    no_grad, in place on one fresh tensor: the gated product, one reduction pass for the mean
    square (``vector_norm``) and two scaling passes, against the norm's six full-size
    temporaries. Equal to it within float32 rounding."""
    h = F.silu(gate)
    h.mul_(y)
    groups = h.view(*h.shape[:-1], h.shape[-1] // norm.group_size, norm.group_size)
    mean_square = torch.linalg.vector_norm(groups, dim=-1, keepdim=True).square_()
    mean_square.div_(norm.group_size).add_(norm.variance_epsilon)
    groups.mul_(mean_square.rsqrt_())
    return h.mul_(norm.weight)


class _Mamba2Forward:
    """The forward shared by transformers' Mamba-2 mixers; ``ssmscan_impl`` is the ``impl`` of
    their scans. A family's twists are the two hooks ``_project`` and ``_gate``."""

    ssmscan_impl: Impl = "auto"

    def _project(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """(batch, L, hidden) -> (batch, L, gate + conv + heads): ``in_proj``."""
        return self.in_proj(hidden_states)  # type: ignore[attr-defined]

    def _gate(self, scan_output: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """The family's gated RMS norm of (batch, L, d) scan output by (batch, L, d) gate."""
        norm = self.norm  # type: ignore[attr-defined]
        if (
            type(norm) in _GATED_NORMS
            and not torch.is_grad_enabled()
            and scan_output.dtype == gate.dtype == norm.weight.dtype == torch.float32
        ):
            return _gated_rms_norm(norm, scan_output, gate)
        return norm(scan_output, gate)

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
        mixer: Any = self
        batch, seq_len, _ = hidden_states.shape
        dtype = hidden_states.dtype
        d, heads, head_dim = mixer.intermediate_size, mixer.num_heads, mixer.head_dim
        groups, n = mixer.n_groups, mixer.ssm_state_size
        projected = self._project(mask_padding(hidden_states, attention_mask))
        gate, xBC, dt = projected.split([d, mixer.conv_dim, heads], dim=-1)
        xBC = mask_padding(causal_conv_tokens(mixer, xBC, cache, dtype), attention_mask)
        x, B, C = torch.split(xBC, [d, groups * n, groups * n], dim=-1)
        out = ssd_scan_with_cache(
            mixer,
            cache,
            x.reshape(batch, seq_len, heads, head_dim),
            dt,
            B.reshape(batch, seq_len, groups, n),
            C.reshape(batch, seq_len, groups, n),
            self.ssmscan_impl,
        ).reshape(batch, seq_len, d)
        return mixer.out_proj(self._gate(out, gate).to(dtype))


class SsmscanMamba2Mixer(_Mamba2Forward, Mamba2Mixer):
    """transformers' ``Mamba2Mixer`` computing on ssmscan ops; created only by ``use_ssmscan``."""


class SsmscanBambaMixer(_Mamba2Forward, BambaMixer):
    """transformers' ``BambaMixer`` on ssmscan ops."""


class SsmscanGraniteMoeHybridMambaLayer(_Mamba2Forward, GraniteMoeHybridMambaLayer):
    """transformers' ``GraniteMoeHybridMambaLayer`` on ssmscan ops."""


class SsmscanNemotronHMamba2Mixer(_Mamba2Forward, NemotronHMamba2Mixer):
    """transformers' ``NemotronHMamba2Mixer`` on ssmscan ops."""


class SsmscanZamba2MambaMixer(_Mamba2Forward, Zamba2MambaMixer):
    """transformers' ``Zamba2MambaMixer`` on ssmscan ops (dt clamped below at
    ``time_step_min`` in a chunk, as transformers does)."""


class SsmscanFalconH1Mixer(_Mamba2Forward, FalconH1Mixer):
    """transformers' ``FalconH1Mixer`` on ssmscan ops: the input scaled by ``ssm_in_multiplier``,
    the projections by ``mup_vector``; without ``mamba_rms_norm`` a plain ``silu`` gate, applied
    after the scan as transformers does."""

    def _project(self, hidden_states: torch.Tensor) -> torch.Tensor:
        mixer: Any = self  # ssm_in_multiplier is annotated optional; the config always sets it
        return mixer.in_proj(hidden_states * mixer.ssm_in_multiplier) * mixer.mup_vector

    def _gate(self, scan_output: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        mixer: Any = self
        if mixer.mamba_rms_norm:
            return mixer.norm(scan_output, gate)
        return scan_output * F.silu(gate)
