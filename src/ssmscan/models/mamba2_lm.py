"""``Mamba2LM``: embedding, residual Mamba-2 blocks, final RMSNorm and a tied head (mamba-ssm's
``MambaLMHeadModel`` with ``ssm_cfg={"layer": "Mamba2"}``, without the ``backbone.`` prefix)."""

from __future__ import annotations

import math

import torch
from torch import nn

from ssmscan.models.config import Mamba2Config
from ssmscan.models.lm import _generate
from ssmscan.models.mamba import RMSNorm
from ssmscan.models.mamba2 import Mamba2Block, _check_impl
from ssmscan.models.state import MambaState
from ssmscan.ops.ssd_scan.api import Impl


class Mamba2LM(nn.Module):
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

    def __init__(self, config: Mamba2Config, impl: Impl = "auto") -> None:
        super().__init__()
        _check_impl(impl)
        self.config = config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.embedding = nn.Embedding(config.padded_vocab_size, config.d_model)
            self.layers = nn.ModuleList(Mamba2Block(config, impl) for _ in range(config.n_layer))
            self.norm_f = RMSNorm(config.d_model, eps=config.rms_norm_eps)
            self.lm_head = nn.Linear(config.d_model, config.padded_vocab_size, bias=False)
            self._init_weights()
        if config.tie_embeddings:
            self.lm_head.weight = self.embedding.weight
        self._impl: Impl = impl

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

    @torch.no_grad()
    def _init_weights(self) -> None:
        """mamba-ssm's ``_init_weights`` (no MLP, one residual per layer): embedding ~ N(0, 0.02);
        Linear biases zero; out_proj kaiming-uniform scaled by 1/sqrt(n_layer)."""
        nn.init.normal_(self.embedding.weight, std=0.02)
        for block in self.layers:
            assert isinstance(block, Mamba2Block)
            mixer = block.mixer
            for linear in (mixer.in_proj, mixer.out_proj):
                if linear.bias is not None:
                    nn.init.zeros_(linear.bias)
            nn.init.kaiming_uniform_(mixer.out_proj.weight, a=math.sqrt(5))
            mixer.out_proj.weight /= math.sqrt(self.config.n_layer)

    @property
    def impl(self) -> Impl:
        """The SSD scan implementation every layer uses; assignable."""
        return self._impl

    @impl.setter
    def impl(self, value: Impl) -> None:
        _check_impl(value)
        self._impl = value
        for block in self.layers:
            assert isinstance(block, Mamba2Block)
            block.mixer.impl = value

    def forward(
        self,
        input_ids: torch.Tensor,
        state: MambaState | None = None,
        seq_idx: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, MambaState]:
        """Logits for ``input_ids`` continuing from ``state``, and the state after them.

        Args:
            input_ids: (batch, L) int64 token ids, L >= 1.
            state: the ``MambaState`` returned by the previous call for the same sequences, or None
                to start fresh.
            seq_idx: optional (batch, L) int32/int64 nondecreasing sequence index of each token,
                for packed sequences; tokens whose index differs never mix. Tokens continue
                ``state`` only while their index is 0 from the row's start.

        Returns:
            ``(logits, state)``: logits (batch, L, vocab_size) in the model's dtype and the new
            ``MambaState`` (fresh tensors; the given state is not modified), with ``seq_idx`` the
            state of each row's last sequence.
        """
        if state is not None and state.n_layer != len(self.layers):
            raise ValueError(
                f"state covers {state.n_layer} layers; the model has {len(self.layers)}"
            )
        hidden = self.embedding(input_ids)
        conv_states, ssm_states = [], []
        for i, block in enumerate(self.layers):
            conv_state = state.conv_states[i] if state is not None else None
            ssm_state = state.ssm_states[i] if state is not None else None
            hidden, conv_state, ssm_state = block(hidden, conv_state, ssm_state, seq_idx)
            conv_states.append(conv_state)
            ssm_states.append(ssm_state)
        hidden = self.norm_f(hidden.to(self.norm_f.weight.dtype))
        logits = self.lm_head(hidden)
        if self.config.padded_vocab_size != self.config.vocab_size:
            logits = logits[..., : self.config.vocab_size]
        return logits, MambaState(tuple(conv_states), tuple(ssm_states))

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        temperature: float | None = None,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Continue ``input_ids`` by ``max_new_tokens`` tokens: one prefill, then decode steps.

        Args:
            input_ids: (batch, L) int64 prompt, L >= 1.
            max_new_tokens: number of tokens to append (>= 0).
            temperature: None or 0 for greedy (argmax) decoding; > 0 samples from
                ``softmax(logits / temperature)``.
            top_k: when sampling, keep only the ``top_k`` most likely tokens.
            generator: random generator for sampling (reproducible draws).

        Returns:
            (batch, L + max_new_tokens) int64: the prompt followed by the new tokens.

        Example:
            >>> import torch
            >>> from ssmscan.models import Mamba2Config, Mamba2LM
            >>> model = Mamba2LM(Mamba2Config.preset("tiny")).eval()
            >>> model.generate(torch.tensor([[1, 2, 3]]), 4).shape
            torch.Size([1, 7])
        """
        return _generate(self, input_ids, max_new_tokens, temperature, top_k, generator)
