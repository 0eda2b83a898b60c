"""``MambaConfig`` and ``Mamba2Config``: the hyper-parameters of Mamba-1 and Mamba-2 language
models, with named presets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

# Sizes of the released state-spaces/mamba checkpoints (vocab: the GPT-NeoX tokenizer), plus "tiny",
# the embedded default: small enough that a CPU forward at L=1024 takes a few milliseconds.
_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 64, "n_layer": 2, "vocab_size": 256},
    "small": {"d_model": 256, "n_layer": 4, "vocab_size": 1024},
    "130m": {"d_model": 768, "n_layer": 24, "vocab_size": 50277},
    "370m": {"d_model": 1024, "n_layer": 48, "vocab_size": 50277},
    "790m": {"d_model": 1536, "n_layer": 48, "vocab_size": 50277},
    "1.4b": {"d_model": 2048, "n_layer": 48, "vocab_size": 50277},
    "2.8b": {"d_model": 2560, "n_layer": 64, "vocab_size": 50277},
}


@dataclass(frozen=True)
class MambaConfig:
    """Hyper-parameters of a Mamba-1 language model (mamba-ssm's ``MambaConfig`` + ``Mamba``).

    Args:
        d_model: width of the residual stream.
        n_layer: number of residual Mamba blocks.
        vocab_size: number of tokens; the embedding is padded up to a multiple of
            ``pad_vocab_size_multiple`` (logits are returned for the first ``vocab_size`` only).
        d_state: SSM state size N per channel.
        d_conv: width of the causal depthwise convolution.
        expand: ``d_inner = expand * d_model``.
        dt_rank: rank of the delta projection; ``"auto"`` is ``ceil(d_model / 16)``.
        dt_min, dt_max: range of the initial step sizes (log-uniform).
        dt_init: ``"random"`` (uniform dt_proj weight) or ``"constant"``.
        dt_scale: scale of the dt_proj weight init.
        dt_init_floor: lower clamp of the initial step sizes.
        conv_bias: bias in the depthwise convolution.
        bias: bias in the in/out projections.
        rms_norm_eps: epsilon of every RMSNorm.
        pad_vocab_size_multiple: embedding rows are padded to a multiple of this.
        tie_embeddings: the output head shares the embedding's weight.
        residual_in_fp32: keep the residual stream in float32 (matters for 16-bit models).
        seed: seed of the initialisation (``MambaLM.from_config`` is deterministic).

    Example:
        >>> from ssmscan.models import MambaConfig
        >>> cfg = MambaConfig.preset("tiny")
        >>> cfg.d_inner, cfg.resolved_dt_rank, cfg.padded_vocab_size
        (128, 4, 256)
        >>> import dataclasses
        >>> dataclasses.replace(cfg, n_layer=3).n_layer
        3
    """

    d_model: int
    n_layer: int
    vocab_size: int
    d_state: int = 16
    d_conv: int = 4
    expand: int = 2
    dt_rank: int | str = "auto"
    dt_min: float = 0.001
    dt_max: float = 0.1
    dt_init: str = "random"
    dt_scale: float = 1.0
    dt_init_floor: float = 1e-4
    conv_bias: bool = True
    bias: bool = False
    rms_norm_eps: float = 1e-5
    pad_vocab_size_multiple: int = 8
    tie_embeddings: bool = True
    residual_in_fp32: bool = True
    seed: int = 0

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = _PRESETS

    def __post_init__(self) -> None:
        for name in ("d_model", "n_layer", "vocab_size", "d_state", "d_conv", "expand"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"MambaConfig.{name} must be a positive int; got {value!r}")
        if self.dt_rank != "auto" and not (isinstance(self.dt_rank, int) and self.dt_rank >= 1):
            raise ValueError(
                f"MambaConfig.dt_rank must be 'auto' or a positive int; got {self.dt_rank!r}"
            )
        if self.dt_init not in ("random", "constant"):
            raise ValueError(
                f"MambaConfig.dt_init must be 'random' or 'constant'; got {self.dt_init!r}"
            )
        if not 0 < self.dt_min <= self.dt_max:
            raise ValueError(f"need 0 < dt_min <= dt_max; got {self.dt_min}, {self.dt_max}")
        if self.pad_vocab_size_multiple < 1:
            raise ValueError(
                f"pad_vocab_size_multiple must be >= 1; got {self.pad_vocab_size_multiple}"
            )

    @property
    def d_inner(self) -> int:
        """Channels of the mixer: ``expand * d_model``."""
        return self.expand * self.d_model

    @property
    def resolved_dt_rank(self) -> int:
        """``dt_rank`` with ``"auto"`` resolved to ``ceil(d_model / 16)``."""
        return math.ceil(self.d_model / 16) if self.dt_rank == "auto" else int(self.dt_rank)

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the embedding: ``vocab_size`` rounded up to ``pad_vocab_size_multiple``."""
        m = self.pad_vocab_size_multiple
        return (self.vocab_size + m - 1) // m * m

    @classmethod
    def preset(cls, name: str) -> MambaConfig:
        """The named preset (a key of ``MambaConfig.PRESETS``); change fields with
        ``dataclasses.replace``.

        Args:
            name: ``"tiny"``, ``"small"``, ``"130m"``, ``"370m"``, ``"790m"``, ``"1.4b"``, ``"2.8b"``.

        Returns:
            The config (nothing is allocated until a model is built from it).

        Example:
            >>> MambaConfig.preset("130m").d_model
            768
        """
        if name not in cls.PRESETS:
            raise ValueError(f"unknown Mamba preset {name!r}; known: {sorted(cls.PRESETS)}")
        return cls(**cls.PRESETS[name])


# Sizes of the released state-spaces/mamba2 checkpoints (mamba-ssm's ``MambaConfig`` with
# ``ssm_cfg={"layer": "Mamba2"}``, ``pad_vocab_size_multiple=16``; the ``Mamba2`` defaults
# d_state 128, headdim 64, ngroups 1), plus "tiny" (headdim 16: four heads, two groups).
_MAMBA2_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 64, "n_layer": 2, "vocab_size": 256, "d_state": 16, "headdim": 16,
             "ngroups": 2},
    "130m": {"d_model": 768, "n_layer": 24, "vocab_size": 50277},
    "370m": {"d_model": 1024, "n_layer": 48, "vocab_size": 50277},
    "780m": {"d_model": 1536, "n_layer": 48, "vocab_size": 50277},
    "1.3b": {"d_model": 2048, "n_layer": 48, "vocab_size": 50277},
    "2.7b": {"d_model": 2560, "n_layer": 64, "vocab_size": 50277},
}  # fmt: skip


@dataclass(frozen=True)
class Mamba2Config:
    """Hyper-parameters of a Mamba-2 language model (mamba-ssm's ``MambaConfig`` + ``Mamba2``).

    Args:
        d_model: width of the residual stream.
        n_layer: number of residual Mamba-2 blocks.
        vocab_size: number of tokens; the embedding is padded up to a multiple of
            ``pad_vocab_size_multiple`` (logits are returned for the first ``vocab_size`` only).
        d_state: SSM state size N per head.
        d_conv: width of the causal depthwise convolution over ``(x, B, C)``.
        expand: ``d_inner = expand * d_model``.
        headdim: channels per head; ``nheads = d_inner // headdim``.
        ngroups: groups of B and C (and of the gated RMSNorm); divides ``nheads``.
        A_init_range: A is drawn uniformly from this range (``A_log = log(A)``).
        D_has_hdim: the skip weight D has one entry per channel instead of one per head.
        rmsnorm: gate with a grouped RMSNorm (``norm(y * silu(z))``) before ``out_proj``; when
            False, ``z`` gates inside the scan.
        dt_min, dt_max: range of the initial step sizes (log-uniform).
        dt_init_floor: lower clamp of the initial step sizes.
        dt_limit: ``(min, max)`` clamp of the step size after the softplus.
        conv_init: when set, the convolution weight is drawn from ``U(-conv_init, conv_init)``.
        conv_bias: bias in the depthwise convolution.
        bias: bias in the in/out projections.
        chunk_size: chunk length of the SSD scan (mamba-ssm's default is 256); it changes speed,
            never the result beyond rounding. None lets ``ssmscan.ssd_scan``'s planner choose.
        rms_norm_eps: epsilon of every RMSNorm.
        pad_vocab_size_multiple: embedding rows are padded to a multiple of this.
        tie_embeddings: the output head shares the embedding's weight.
        residual_in_fp32: keep the residual stream in float32 (matters for 16-bit models).
        seed: seed of the initialisation (``Mamba2LM.from_config`` is deterministic).

    Example:
        >>> from ssmscan.models import Mamba2Config
        >>> cfg = Mamba2Config.preset("130m")
        >>> cfg.d_inner, cfg.nheads, cfg.conv_dim, cfg.d_in_proj, cfg.padded_vocab_size
        (1536, 24, 1792, 3352, 50288)
    """

    d_model: int
    n_layer: int
    vocab_size: int
    d_state: int = 128
    d_conv: int = 4
    expand: int = 2
    headdim: int = 64
    ngroups: int = 1
    A_init_range: tuple[float, float] = (1.0, 16.0)
    D_has_hdim: bool = False
    rmsnorm: bool = True
    dt_min: float = 0.001
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4
    dt_limit: tuple[float, float] = (0.0, float("inf"))
    conv_init: float | None = None
    conv_bias: bool = True
    bias: bool = False
    chunk_size: int | None = None
    rms_norm_eps: float = 1e-5
    pad_vocab_size_multiple: int = 16
    tie_embeddings: bool = True
    residual_in_fp32: bool = True
    seed: int = 0

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = _MAMBA2_PRESETS

    def __post_init__(self) -> None:
        for name in ("d_model", "n_layer", "vocab_size", "d_state", "d_conv", "expand", "headdim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Mamba2Config.{name} must be a positive int; got {value!r}")
        if self.d_inner % self.headdim != 0:
            raise ValueError(
                f"Mamba2Config: d_inner = expand * d_model = {self.d_inner} must be divisible by "
                f"headdim={self.headdim}"
            )
        if not isinstance(self.ngroups, int) or self.ngroups < 1 or self.nheads % self.ngroups:
            raise ValueError(
                f"Mamba2Config.ngroups must be a positive int dividing nheads={self.nheads}; "
                f"got {self.ngroups!r}"
            )
        lo, hi = self.A_init_range
        if not 0 < lo <= hi:
            raise ValueError(f"need 0 < A_init_range[0] <= A_init_range[1]; got {(lo, hi)}")
        if not 0 < self.dt_min <= self.dt_max:
            raise ValueError(f"need 0 < dt_min <= dt_max; got {self.dt_min}, {self.dt_max}")
        if len(self.dt_limit) != 2 or not self.dt_limit[0] <= self.dt_limit[1]:
            raise ValueError(f"dt_limit must be (min, max) with min <= max; got {self.dt_limit}")
        if self.chunk_size is not None and (
            isinstance(self.chunk_size, bool)
            or not isinstance(self.chunk_size, int)
            or self.chunk_size < 1
        ):
            raise ValueError(
                f"Mamba2Config.chunk_size must be None or a positive int; got {self.chunk_size!r}"
            )
        if self.pad_vocab_size_multiple < 1:
            raise ValueError(
                f"pad_vocab_size_multiple must be >= 1; got {self.pad_vocab_size_multiple}"
            )

    @property
    def d_inner(self) -> int:
        """Channels of the mixer: ``expand * d_model``."""
        return self.expand * self.d_model

    @property
    def nheads(self) -> int:
        """SSM heads: ``d_inner // headdim``."""
        return self.d_inner // self.headdim

    @property
    def conv_dim(self) -> int:
        """Channels of the convolution, ``(x, B, C)``: ``d_inner + 2 * ngroups * d_state``."""
        return self.d_inner + 2 * self.ngroups * self.d_state

    @property
    def d_in_proj(self) -> int:
        """Outputs of ``in_proj``, ``(z, x, B, C, dt)``: ``d_inner + conv_dim + nheads``."""
        return self.d_inner + self.conv_dim + self.nheads

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the embedding: ``vocab_size`` rounded up to ``pad_vocab_size_multiple``."""
        m = self.pad_vocab_size_multiple
        return (self.vocab_size + m - 1) // m * m

    @classmethod
    def preset(cls, name: str) -> Mamba2Config:
        """The named preset (a key of ``Mamba2Config.PRESETS``); change fields with
        ``dataclasses.replace``.

        Args:
            name: ``"tiny"``, ``"130m"``, ``"370m"``, ``"780m"``, ``"1.3b"``, ``"2.7b"``.

        Returns:
            The config (nothing is allocated until a model is built from it).

        Example:
            >>> Mamba2Config.preset("2.7b").n_layer
            64
        """
        if name not in cls.PRESETS:
            raise ValueError(f"unknown Mamba-2 preset {name!r}; known: {sorted(cls.PRESETS)}")
        return cls(**cls.PRESETS[name])
