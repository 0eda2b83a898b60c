"""``Mamba2LM``: embedding, residual Mamba-2 blocks, final RMSNorm and a tied head (mamba-ssm's
``MambaLMHeadModel`` with ``ssm_cfg={"layer": "Mamba2"}``, without the ``backbone.`` prefix)."""

from __future__ import annotations

import torch

from ssmscan.models.config import Mamba2Config
from ssmscan.models.lm_base import LMBase
from ssmscan.models.mamba2 import Mamba2Block, _check_impl
from ssmscan.models.state import MambaState
from ssmscan.ops.ssd_scan.api import Impl


class Mamba2LM(LMBase):
    """A Mamba-2 language model on ssmscan ops, initialised deterministically from ``config.seed``.

    ``forward(input_ids, state, seq_idx)`` is prefill (``state=None``), chunked prefill (a state
    and L > 1) and decode (a state and L == 1) in one, exactly as ``MambaLM``; each returns the
    state after its tokens (a ``MambaState`` whose conv states are (batch, conv_dim, d_conv) and
    SSM states (batch, nheads, headdim, d_state)), so a prefill over L followed by k decode steps
    gives the logits of one forward over L + k. ``seq_idx`` packs several sequences into a row:
    none of them sees another, and the state returned is that of each row's last sequence.

    Parameter names: ``embedding``, ``layers.{i}.norm``, ``layers.{i}.mixer.{in_proj, conv1d,
    dt_bias, A_log, D, norm, out_proj}``, ``norm_f``, ``lm_head`` (mamba-ssm's, without the
    ``backbone.`` prefix).

    Args:
        config: the hyper-parameters.
        impl: SSD scan implementation for every layer (``"auto"``, ``"cpu"``, ``"triton"``,
            ``"reference"``); change later through the ``impl`` attribute.

    Example:
        >>> import torch
        >>> from ssmscan.models import Mamba2Config, Mamba2LM
        >>> model = Mamba2LM(Mamba2Config.preset("tiny")).eval()
        >>> ids = torch.randint(0, 256, (2, 7))
        >>> logits, state = model(ids)
        >>> logits.shape, state.conv_states[0].shape, state.ssm_states[0].shape
        (torch.Size([2, 7, 256]), torch.Size([2, 192, 4]), torch.Size([2, 8, 16, 16]))
        >>> next_logits, state = model(ids[:, -1:], state)  # one decode step
        >>> packed = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [0, 1, 1, 1, 2, 2, 2]])
        >>> model(ids, seq_idx=packed)[0].shape  # two rows of packed sequences
        torch.Size([2, 7, 256])
        >>> model.generate(ids, max_new_tokens=3).shape
        torch.Size([2, 10])
    """

    config: Mamba2Config

    def __init__(self, config: Mamba2Config, impl: Impl = "auto") -> None:
        super().__init__(config, impl, Mamba2Block, _check_impl)

    @classmethod
    def from_config(cls, config: Mamba2Config, impl: Impl = "auto") -> Mamba2LM:
        """A freshly initialised model (seeded by ``config.seed``; nothing is downloaded).

        Args:
            config: the hyper-parameters.
            impl: SSD scan implementation (see the class docstring).

        Returns:
            The model in float32 on CPU, in training mode (call ``.eval()`` for inference).

        Example:
            >>> from ssmscan.models import Mamba2Config, Mamba2LM
            >>> Mamba2LM.from_config(Mamba2Config.preset("tiny")).config.nheads
            8
        """
        return cls(config, impl=impl)

    def forward(
        self,
        input_ids: torch.Tensor,
        state: MambaState | None = None,
        seq_idx: torch.Tensor | None = None,
        *,
        inplace: bool = False,
    ) -> tuple[torch.Tensor, MambaState]:
        """Logits for ``input_ids`` continuing from ``state``, and the state after them.

        Args:
            input_ids: (batch, L) int64 token ids, L >= 1.
            state: the ``MambaState`` returned by the previous call for the same sequences, or None
                to start fresh.
            seq_idx: optional (batch, L) int32/int64 nondecreasing sequence index of each token,
                for packed sequences; tokens whose index differs never mix. Tokens continue
                ``state`` only while their index is 0 from the row's start.
            inplace: write the new state into ``state`` (required) and return it: the decode
                step for CUDA graphs, whose buffers are static (Note [in-place decode] in
                ``ssmscan.models.mamba``).

        Returns:
            ``(logits, state)``: logits (batch, L, vocab_size) in the model's dtype and the new
            ``MambaState`` (fresh tensors; the given state is not modified, unless ``inplace``),
            with ``seq_idx`` the state of each row's last sequence.
        """
        return self._forward(input_ids, state, seq_idx, inplace=inplace)
