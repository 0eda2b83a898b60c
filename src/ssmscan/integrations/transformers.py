"""Hugging Face transformers: run transformers' SSM models on ssmscan ops.

Supported families (each a row of ``FAMILIES``: transformers' mixer class and the ssmscan
subclass that replaces its ``forward``). Mamba-1: Mamba (``MambaMixer``), FalconMamba
(``FalconMambaMixer``: RMS norms on dt, B, C), Jamba (``JambaMambaMixer``: RMS norms with
weights) and Zamba (``ZambaMambaMixer``: several Mamba heads, one grouped scan). Mamba-2 (one SSD
scan per chunk): Mamba2 (``Mamba2Mixer``), Bamba (``BambaMixer``), GraniteMoeHybrid
(``GraniteMoeHybridMambaLayer``), NemotronH (``NemotronHMamba2Mixer``), FalconH1
(``FalconH1Mixer``: input and projection multipliers, optional gated norm) and Zamba2
(``Zamba2MambaMixer``). A family with another mixer adds its row.

How transformers (5.x; 5.24 and 5.25 are tested) runs a Mamba-1 mixer: ``forward(hidden_states,
cache, attention_mask)`` runs a causal depthwise convolution and a selective scan through
module-level helpers that the hub ``kernels`` package may replace by mamba-ssm's CUDA kernels;
without them they are a sequential Python loop over time. The decode state lives in a
``DynamicCache`` whose per-layer ``LinearAttentionLayer`` holds the conv and recurrent states
(``get_conv_state`` / ``update_conv_state`` / ``get_recurrent_state`` /
``update_recurrent_state``); ``get_*`` return None until the layer has seen a first forward.

``use_ssmscan(model)`` switches every supported mixer's class to an ssmscan subclass whose
``forward`` is the same computation on ``ssmscan.selective_scan`` (Mamba-2: ``ssmscan.ssd_scan``;
a multi-token chunk, one fused op continuing from the cached state) and
``ssmscan::selective_state_update`` (one token; Mamba-2's 4-D state layout), reading
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

One deliberate difference for Mamba-1: when a cache already holds a state and a multi-token chunk
arrives (chunked prefill, assisted decoding), transformers' torch path scans the chunk's head from
a zero state (its "initial hidden state is not supported"); the ssmscan mixer continues from the
cached state, which is what the recurrence means (transformers' Mamba-2 path does so too). For
ordinary forwards and ``generate`` the two agree.
"""

# ruff: noqa: E402  (transformers' version is checked before its model modules are imported)
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import transformers
from packaging.version import Version

_MIN_TRANSFORMERS = (5, 24)

if Version(transformers.__version__).release < _MIN_TRANSFORMERS:
    raise ImportError(
        "ssmscan.integrations.transformers needs transformers >= "
        f"{'.'.join(map(str, _MIN_TRANSFORMERS))} (its cache API for recurrent states); found "
        f"{transformers.__version__} at {transformers.__file__}: pip install 'ssmscan[hf]'"
    )

from transformers.models.bamba.modeling_bamba import BambaMixer
from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1Mixer
from transformers.models.falcon_mamba.modeling_falcon_mamba import FalconMambaMixer
from transformers.models.granitemoehybrid.modeling_granitemoehybrid import (
    GraniteMoeHybridMambaLayer,
)
from transformers.models.jamba.modeling_jamba import JambaMambaMixer
from transformers.models.mamba.modeling_mamba import MambaMixer
from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer
from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer
from transformers.models.zamba.modeling_zamba import ZambaMambaMixer
from transformers.models.zamba2.modeling_zamba2 import Zamba2MambaMixer

from ssmscan.integrations._hf_mamba1 import (
    SsmscanFalconMambaMixer,
    SsmscanJambaMambaMixer,
    SsmscanMambaMixer,
    SsmscanZambaMambaMixer,
)
from ssmscan.integrations._hf_mamba2 import (
    SsmscanBambaMixer,
    SsmscanFalconH1Mixer,
    SsmscanGraniteMoeHybridMambaLayer,
    SsmscanMamba2Mixer,
    SsmscanNemotronHMamba2Mixer,
    SsmscanZamba2MambaMixer,
)
from ssmscan.ops.selective_scan.api import Impl

__all__ = [
    "FAMILIES",
    "Family",
    "SsmscanBambaMixer",
    "SsmscanFalconH1Mixer",
    "SsmscanFalconMambaMixer",
    "SsmscanGraniteMoeHybridMambaLayer",
    "SsmscanJambaMambaMixer",
    "SsmscanMamba2Mixer",
    "SsmscanMambaMixer",
    "SsmscanNemotronHMamba2Mixer",
    "SsmscanZamba2MambaMixer",
    "SsmscanZambaMambaMixer",
    "use_ssmscan",
]

_IMPLS = ("auto", "cpu", "triton", "reference")


@dataclass(frozen=True)
class Family:
    """One supported model family: transformers' mixer class and its ssmscan subclass.

    ``adapted`` subclasses ``mixer`` without new parameters or buffers, overrides ``forward``
    and has a class attribute ``ssmscan_impl`` (the ``impl`` of its scans).
    """

    name: str
    mixer: type[torch.nn.Module]
    adapted: type[torch.nn.Module]


FAMILIES: tuple[Family, ...] = (
    Family("Mamba", MambaMixer, SsmscanMambaMixer),
    Family("FalconMamba", FalconMambaMixer, SsmscanFalconMambaMixer),
    Family("Jamba", JambaMambaMixer, SsmscanJambaMambaMixer),
    Family("Zamba", ZambaMambaMixer, SsmscanZambaMambaMixer),
    Family("Mamba2", Mamba2Mixer, SsmscanMamba2Mixer),
    Family("Bamba", BambaMixer, SsmscanBambaMixer),
    Family("GraniteMoeHybrid", GraniteMoeHybridMambaLayer, SsmscanGraniteMoeHybridMambaLayer),
    Family("NemotronH", NemotronHMamba2Mixer, SsmscanNemotronHMamba2Mixer),
    Family("FalconH1", FalconH1Mixer, SsmscanFalconH1Mixer),
    Family("Zamba2", Zamba2MambaMixer, SsmscanZamba2MambaMixer),
)


def _family_of(module: torch.nn.Module) -> Family | None:
    """The family whose mixer (or adapted mixer) ``module`` is; raises TypeError for a subclass
    of a supported mixer, whose forward the adapter cannot vouch for."""
    for family in FAMILIES:
        if type(module) in (family.mixer, family.adapted):
            return family
        if isinstance(module, family.mixer):
            raise TypeError(
                f"use_ssmscan supports transformers' {family.mixer.__qualname__}; found the "
                f"subclass {type(module).__qualname__}, whose forward it cannot vouch for"
            )
    return None


def use_ssmscan(model: torch.nn.Module, impl: Impl = "auto") -> torch.nn.Module:
    """Switch a transformers SSM model's mixers to ssmscan ops, in place, without copying weights.

    Every mixer of a supported family (Mamba, FalconMamba, Jamba, Zamba, Mamba2, Bamba,
    GraniteMoeHybrid, NemotronH, FalconH1, Zamba2; see ``FAMILIES``) becomes its ssmscan subclass
    (same parameters, same cache); a multi-token chunk runs one ``ssmscan.selective_scan`` (Mamba-2
    families: ``ssmscan.ssd_scan``) per layer, a decode step one ``selective_state_update``. The model
    works with ``generate()`` (greedy, sampling, beam search, continued and assisted generation)
    and with ``torch.compile(fullgraph=True)``. Calling it again only updates ``impl``.

    Args:
        model: a transformers model (e.g. ``MambaForCausalLM``, ``FalconMambaModel``,
            ``JambaForCausalLM``, ``Mamba2ForCausalLM``, ``BambaForCausalLM``) holding at least
            one supported mixer.
        impl: scan implementation: ``"auto"`` (the kernel for the device), ``"cpu"``,
            ``"triton"`` or ``"reference"`` (passed to ``ssmscan.selective_scan`` for the
            Mamba-1 families, ``ssmscan.ssd_scan`` for the Mamba-2 ones).

    Returns:
        The same model object.

    Raises:
        TypeError: ``model`` holds no mixer of a supported family, or a subclass of one.
        ValueError: ``impl`` is not one of the names above.

    Example:
        >>> import torch, transformers
        >>> from ssmscan.integrations.transformers import use_ssmscan
        >>> cfg = transformers.MambaConfig(vocab_size=64, hidden_size=32, state_size=8,
        ...     num_hidden_layers=2)
        >>> model = use_ssmscan(transformers.MambaForCausalLM(cfg).eval())
        >>> model(torch.tensor([[1, 2, 3]])).logits.shape
        torch.Size([1, 3, 64])
    """
    if impl not in _IMPLS:
        raise ValueError(f"impl must be one of {_IMPLS}; got {impl!r}")
    if not isinstance(model, torch.nn.Module):
        found = []
    else:
        found = [(m, f) for m in model.modules() if (f := _family_of(m)) is not None]
    if not found:
        names = ", ".join(f.name for f in FAMILIES)
        raise TypeError(
            f"use_ssmscan takes a transformers model of a supported family ({names}) holding "
            f"at least one of their mixers; got {type(model).__module__}.{type(model).__qualname__}"
        )
    for module, family in found:
        module.__class__ = family.adapted
        cast(Any, module).ssmscan_impl = impl  # the class was just switched
    return model
