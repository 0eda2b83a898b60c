"""``MambaLM``: embedding, residual Mamba blocks, final RMSNorm and a tied head; ``build_model``."""

from __future__ import annotations

import torch

from ssmscan.models.config import MambaConfig
from ssmscan.models.lm_base import LMBase
from ssmscan.models.mamba import MambaBlock, _check_impl
from ssmscan.models.state import MambaState
from ssmscan.ops.selective_scan.api import Impl


class MambaLM(LMBase):
    """A Mamba-1 language model on ssmscan ops, initialised deterministically from ``config.seed``.

    ``forward(input_ids, state)`` is prefill (``state=None``), chunked prefill (a state and L > 1)
    and decode (a state and L == 1) in one; each returns the state after its tokens, so a prefill
    over L followed by k decode steps gives the logits of one forward over L + k.

    Args:
        config: the hyper-parameters.
        impl: scan implementation for every layer (``"auto"``, ``"cpu"``, ``"triton"``,
            ``"reference"``); change later through the ``impl`` attribute.

    Example:
        >>> import torch
        >>> from ssmscan.models import MambaConfig, MambaLM
        >>> model = MambaLM(MambaConfig.preset("tiny")).eval()
        >>> ids = torch.randint(0, 256, (2, 7))
        >>> logits, state = model(ids)
        >>> logits.shape, state.conv_states[0].shape, state.ssm_states[0].shape
        (torch.Size([2, 7, 256]), torch.Size([2, 128, 4]), torch.Size([2, 128, 16]))
        >>> next_logits, state = model(ids[:, -1:], state)  # one decode step
        >>> model.generate(ids, max_new_tokens=3).shape
        torch.Size([2, 10])
    """

    config: MambaConfig

    def __init__(self, config: MambaConfig, impl: Impl = "auto") -> None:
        super().__init__(config, impl, MambaBlock, _check_impl)

    @classmethod
    def from_config(cls, config: MambaConfig, impl: Impl = "auto") -> MambaLM:
        """A freshly initialised model (seeded by ``config.seed``; nothing is downloaded).

        Args:
            config: the hyper-parameters.
            impl: scan implementation (see the class docstring).

        Returns:
            The model in float32 on CPU, in training mode (call ``.eval()`` for inference).

        Example:
            >>> from ssmscan.models import MambaConfig, MambaLM
            >>> MambaLM.from_config(MambaConfig.preset("tiny")).config.n_layer
            2
        """
        return cls(config, impl=impl)

    def forward(
        self, input_ids: torch.Tensor, state: MambaState | None = None, *, inplace: bool = False
    ) -> tuple[torch.Tensor, MambaState]:
        """Logits for ``input_ids`` continuing from ``state``, and the state after them.

        Args:
            input_ids: (batch, L) int64 token ids, L >= 1.
            state: the ``MambaState`` returned by the previous call for the same sequences, or None
                to start fresh.
            inplace: write the new state into ``state`` (required) and return it: the decode
                step for CUDA graphs, whose buffers are static (Note [in-place decode] in
                ``ssmscan.models.mamba``).

        Returns:
            ``(logits, state)``: logits (batch, L, vocab_size) in the model's dtype and the new
            ``MambaState`` (fresh tensors; the given state is not modified, unless ``inplace``).
        """
        return self._forward(input_ids, state, inplace=inplace)


def build_model(name_or_config: str | MambaConfig, impl: Impl = "auto") -> MambaLM:
    """A seeded ``MambaLM`` from a preset name or a ``MambaConfig``.

    Args:
        name_or_config: a key of ``MambaConfig.PRESETS`` (e.g. ``"tiny"``) or a config.
        impl: scan implementation (``"auto"``, ``"cpu"``, ``"triton"``, ``"reference"``).

    Returns:
        The model (float32, CPU, training mode).

    Example:
        >>> from ssmscan.models import build_model
        >>> sum(p.numel() for p in build_model("tiny").parameters()) > 0
        True
    """
    if isinstance(name_or_config, str):
        config = MambaConfig.preset(name_or_config)
    elif isinstance(name_or_config, MambaConfig):
        config = name_or_config
    else:
        raise TypeError(
            f"build_model takes a preset name or a MambaConfig; got {type(name_or_config).__name__}"
        )
    return MambaLM.from_config(config, impl=impl)
