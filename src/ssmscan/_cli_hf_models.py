"""Tiny transformers models of every family ``use_ssmscan`` supports, for ``ssmscan report
--model hf-<family>-tiny`` (``hf-tiny`` is ``hf-mamba-tiny``) and for tests: built from configs
with a seeded random init, nothing downloaded.

A family is named by transformers' ``model_type``. The Mamba-2 models use ``chunk_size`` 16 and
two groups, so short inputs already cross chunk boundaries and share B, C between heads; the
hybrids hold attention (and MLP or MoE) layers beside their mixers as the real models do.
"""

from __future__ import annotations

from typing import Any

import torch

from ssmscan._cli_models import LoadedModel, _LogitsOnly
from ssmscan._cli_util import UsageError

HF_TINY_FAMILIES = (
    "mamba",
    "falcon_mamba",
    "jamba",
    "zamba",
    "mamba2",
    "bamba",
    "granitemoehybrid",
    "nemotron_h",
    "falcon_h1",
    "zamba2",
)

_MAMBA2 = dict(n_groups=2, chunk=16, heads=8, head_dim=8, state=8)


def _config(transformers: Any, family: str, vocab_size: int, extra: dict[str, Any]) -> Any:
    """The tiny config of ``family`` (hidden size 32 or 64, 2 to 5 layers); ``extra`` overrides."""
    m2 = _MAMBA2
    attention = dict(num_attention_heads=4, num_key_value_heads=2)
    mamba_kw = dict(
        mamba_n_heads=m2["heads"], mamba_d_head=m2["head_dim"], mamba_n_groups=m2["n_groups"],
        mamba_d_state=m2["state"], mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=m2["chunk"],
    )  # fmt: skip
    configs: dict[str, tuple[str, dict[str, Any]]] = {
        "mamba": ("MambaConfig", dict(hidden_size=64, state_size=16, num_hidden_layers=2, expand=2)),
        "falcon_mamba": (
            "FalconMambaConfig", dict(hidden_size=32, state_size=8, num_hidden_layers=2)
        ),
        # layers: mamba, attention, mamba; one expert: a plain MLP
        "jamba": ("JambaConfig", dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_experts=1,
            attn_layer_period=3, attn_layer_offset=1, mamba_d_state=8, mamba_d_conv=4,
            mamba_expand=2, mamba_dt_rank=4, **attention,
        )),
        # layers: mamba, mamba + shared attention, mamba, ...; two Mamba heads per mixer
        "zamba": ("ZambaConfig", dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=5, num_attention_heads=4,
            num_key_value_heads=4, attention_hidden_size=64, attention_head_dim=16,
            n_mamba_heads=2, mamba_d_state=8, mamba_d_conv=3, mamba_expand=2, mamba_dt_rank=4,
            attn_layer_period=2, attn_layer_offset=1,
        )),
        "mamba2": ("Mamba2Config", dict(
            hidden_size=32, num_hidden_layers=2, expand=2, num_heads=m2["heads"],
            head_dim=m2["head_dim"], state_size=m2["state"], n_groups=m2["n_groups"],
            chunk_size=m2["chunk"],
        )),
        # layers: mamba, attention, mamba
        "bamba": ("BambaConfig", dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=3, attn_layer_indices=[1],
            **attention, **mamba_kw,
        )),
        # layers: mamba, attention, mamba; two experts, one per token, and a shared MLP
        "granitemoehybrid": ("GraniteMoeHybridConfig", dict(
            hidden_size=32, intermediate_size=32, shared_intermediate_size=32,
            num_hidden_layers=3, layer_types=["mamba", "attention", "mamba"],
            num_local_experts=2, num_experts_per_tok=1, **attention, **mamba_kw,
        )),
        # layers: mamba, attention, mamba, MLP
        "nemotron_h": ("NemotronHConfig", dict(
            hidden_size=32, layers_block_type=["mamba", "attention", "mamba", "mlp"],
            head_dim=8, intermediate_size=64, ssm_state_size=m2["state"],
            mamba_num_heads=m2["heads"], mamba_head_dim=m2["head_dim"],
            n_groups=m2["n_groups"], chunk_size=m2["chunk"], **attention,
        )),
        # every layer runs attention and a mixer side by side; the multipliers away from 1
        "falcon_h1": ("FalconH1Config", dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, mamba_d_ssm=64,
            mamba_rms_norm=True, mamba_norm_before_gate=False, ssm_in_multiplier=0.9,
            ssm_out_multiplier=1.1, ssm_multipliers=[0.5, 1.5, 0.8, 1.2, 0.7],
            **attention, **mamba_kw,
        )),
        # layers: mamba, mamba + shared attention, mamba, mamba + shared attention
        "zamba2": ("Zamba2Config", dict(
            hidden_size=32, num_hidden_layers=4,
            layers_block_type=["mamba", "hybrid", "mamba", "hybrid"],
            n_mamba_heads=m2["heads"], mamba_d_state=m2["state"],
            mamba_ngroups=m2["n_groups"], chunk_size=m2["chunk"], mamba_expand=2,
            num_attention_heads=4, num_key_value_heads=4,
        )),
    }  # fmt: skip
    if family not in configs:
        raise ValueError(f"family must be one of {HF_TINY_FAMILIES}; got {family!r}")
    name, kwargs = configs[family]
    kwargs = {**kwargs, "vocab_size": vocab_size, "pad_token_id": 0, "eos_token_id": 1, **extra}
    return getattr(transformers, name)(**kwargs)


def build_hf_tiny(
    family: str,
    vocab_size: int = 256,
    seed: int = 0,
    config_overrides: dict[str, Any] | None = None,
) -> torch.nn.Module:
    """A tiny transformers causal LM of ``family`` (not yet switched to ssmscan), in eval mode.

    Args:
        family: one of ``HF_TINY_FAMILIES`` (transformers' ``model_type``).
        vocab_size: vocabulary size.
        seed: seed of the random init (the global RNG is left as it was).
        config_overrides: further config keyword arguments (e.g. ``initializer_range``).

    Returns:
        The ``*ForCausalLM`` model, float32, on CPU.

    Raises:
        ValueError: an unknown ``family``.

    Example:
        >>> from ssmscan._cli_hf_models import build_hf_tiny
        >>> type(build_hf_tiny("mamba2")).__name__
        'Mamba2ForCausalLM'
    """
    import transformers

    cfg = _config(transformers, family, vocab_size, dict(config_overrides or {}))
    cls = getattr(transformers, type(cfg).__name__.replace("Config", "ForCausalLM"))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(cfg)
    return model.eval()


def load_hf_tiny(spec: str) -> LoadedModel:
    """``hf-tiny`` or ``hf-<family>-tiny``: the tiny model switched to ssmscan, logits only.

    Raises:
        UsageError: an unknown family, or transformers missing.
    """
    family = "mamba" if spec == "hf-tiny" else spec.removeprefix("hf-").removesuffix("-tiny")
    if family not in HF_TINY_FAMILIES:
        names = ", ".join(f"hf-{f}-tiny" for f in HF_TINY_FAMILIES)
        raise UsageError(f"unknown model {spec!r}: the transformers models are hf-tiny, {names}")
    try:
        from ssmscan.integrations.transformers import use_ssmscan
    except ImportError as e:
        raise UsageError(
            f"model {spec!r} needs transformers ({e}); install it with: pip install 'ssmscan[hf]'"
        ) from None
    vocab_size = 256
    model = build_hf_tiny(family, vocab_size=vocab_size)
    return LoadedModel(spec, _LogitsOnly(use_ssmscan(model)).eval(), vocab_size)
