"""``MambaLM``: embedding, residual Mamba blocks, final RMSNorm and a tied head; ``build_model``."""

from __future__ import annotations

import math

import torch
from torch import nn

from ssmscan.models.config import MambaConfig
from ssmscan.models.mamba import MambaBlock, RMSNorm, _check_impl
from ssmscan.models.state import MambaState
from ssmscan.ops.selective_scan.api import Impl


class MambaLM(nn.Module):
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

    def __init__(self, config: MambaConfig, impl: Impl = "auto") -> None:
        super().__init__()
        _check_impl(impl)
        self.config = config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.embedding = nn.Embedding(config.padded_vocab_size, config.d_model)
            self.layers = nn.ModuleList(MambaBlock(config, impl) for _ in range(config.n_layer))
            self.norm_f = RMSNorm(config.d_model, eps=config.rms_norm_eps)
            self.lm_head = nn.Linear(config.d_model, config.padded_vocab_size, bias=False)
            self._init_weights()
        if config.tie_embeddings:
            self.lm_head.weight = self.embedding.weight
        self._impl: Impl = impl

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

    @torch.no_grad()
    def _init_weights(self) -> None:
        """mamba-ssm's ``_init_weights``: embedding ~ N(0, 0.02); Linear biases zero except
        dt_proj's; out_proj kaiming-uniform scaled by 1/sqrt(n_layer) (prenorm residual rescale)."""
        nn.init.normal_(self.embedding.weight, std=0.02)
        for block in self.layers:
            assert isinstance(block, MambaBlock)
            mixer = block.mixer
            for linear in (mixer.in_proj, mixer.out_proj):
                if linear.bias is not None:
                    nn.init.zeros_(linear.bias)
            nn.init.kaiming_uniform_(mixer.out_proj.weight, a=math.sqrt(5))
            mixer.out_proj.weight /= math.sqrt(self.config.n_layer)

    @property
    def impl(self) -> Impl:
        """The scan implementation every layer uses; assignable."""
        return self._impl

    @impl.setter
    def impl(self, value: Impl) -> None:
        _check_impl(value)
        self._impl = value
        for block in self.layers:
            assert isinstance(block, MambaBlock)
            block.mixer.impl = value

    def forward(
        self, input_ids: torch.Tensor, state: MambaState | None = None
    ) -> tuple[torch.Tensor, MambaState]:
        """Logits for ``input_ids`` continuing from ``state``, and the state after them.

        Args:
            input_ids: (batch, L) int64 token ids, L >= 1.
            state: the ``MambaState`` returned by the previous call for the same sequences, or None
                to start fresh.

        Returns:
            ``(logits, state)``: logits (batch, L, vocab_size) in the model's dtype and the new
            ``MambaState`` (fresh tensors; the given state is not modified).
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
            hidden, conv_state, ssm_state = block(hidden, conv_state, ssm_state)
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
            >>> from ssmscan.models import build_model
            >>> model = build_model("tiny").eval()
            >>> g = torch.Generator().manual_seed(0)
            >>> out = model.generate(torch.tensor([[1, 2, 3]]), 4, temperature=0.8, top_k=20,
            ...     generator=g)
            >>> out.shape
            torch.Size([1, 7])
        """
        return _generate(self, input_ids, max_new_tokens, temperature, top_k, generator)


def _generate(
    model: nn.Module,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float | None,
    top_k: int | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """``generate`` for any LM whose ``model(ids, state)`` returns ``(logits, state)``."""
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0; got {max_new_tokens}")
    if temperature is not None and temperature < 0:
        raise ValueError(f"temperature must be None or >= 0; got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be None or >= 1; got {top_k}")
    tokens = [input_ids]
    if max_new_tokens == 0:
        return input_ids
    logits, state = model(input_ids)
    for i in range(max_new_tokens):
        next_ids = _pick(logits[:, -1].float(), temperature, top_k, generator)
        tokens.append(next_ids)
        if i + 1 < max_new_tokens:
            logits, state = model(next_ids, state)
    return torch.cat(tokens, dim=1)


def _pick(
    logits: torch.Tensor,
    temperature: float | None,
    top_k: int | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Next token (batch, 1) from last-position logits (batch, vocab)."""
    if not temperature:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


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
