"""``LMBase``: what ``MambaLM`` and ``Mamba2LM`` share — embedding, residual blocks, final RMSNorm
and a tied head, seeded init, the ``impl`` switch, the layer loop over a ``MambaState``, and
``generate``. Each LM adds its block type, its config, its typed ``forward`` and ``from_config``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from ssmscan.models.config import Mamba2Config, MambaConfig
from ssmscan.models.inference import fused_inference
from ssmscan.models.mamba import RMSNorm
from ssmscan.models.state import MambaState


class LMBase(nn.Module):
    """A Mamba language model's body, initialised deterministically from ``config.seed``:
    ``embedding``, ``layers.{i}`` (pre-norm residual blocks), ``norm_f`` and ``lm_head`` (tied to
    the embedding when ``config.tie_embeddings``). A subclass supplies the block and its forward.

    Args:
        config: the hyper-parameters (``n_layer``, ``d_model``, vocabulary, ``rms_norm_eps``,
            ``tie_embeddings``, ``seed``).
        impl: scan implementation for every layer; change later through the ``impl`` attribute.
        block: ``block(config, impl)`` builds one layer whose ``mixer`` has ``in_proj``,
            ``out_proj`` and ``impl``, and whose forward is ``(hidden, conv_state, ssm_state, ...)
            -> (hidden, conv_state, ssm_state)``: ``hidden + mixer(norm.in_weight_dtype(hidden),
            conv_state, ssm_state, ...)``, the residual in float32 when ``residual_in_fp32``
            (the fused inference loop, ``_fused_layers``, runs exactly that from ``norm``,
            ``mixer`` and ``residual_in_fp32``).
        check_impl: raises ValueError for an ``impl`` the block does not take.

    Example:
        >>> from ssmscan.models import Mamba2Config, Mamba2LM, build_model
        >>> from ssmscan.models.lm_base import LMBase
        >>> isinstance(build_model("tiny"), LMBase), issubclass(Mamba2LM, LMBase)
        (True, True)
    """

    def __init__(
        self,
        config: MambaConfig | Mamba2Config,
        impl: str,
        block: Callable[[Any, Any], nn.Module],
        check_impl: Callable[[str], None],
    ) -> None:
        super().__init__()
        check_impl(impl)
        self._check_impl = check_impl
        self.config = config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.embedding = nn.Embedding(config.padded_vocab_size, config.d_model)
            self.layers = nn.ModuleList(block(config, impl) for _ in range(config.n_layer))
            self.norm_f = RMSNorm(config.d_model, eps=config.rms_norm_eps)
            self.lm_head = nn.Linear(config.d_model, config.padded_vocab_size, bias=False)
            self._init_weights()
        if config.tie_embeddings:
            self.lm_head.weight = self.embedding.weight
        self._impl = impl

    def _mixers(self) -> list[Any]:
        """Each layer's mixer (a ``MambaMixer`` or ``Mamba2Mixer``)."""
        return [block.mixer for block in self.layers]

    @torch.no_grad()
    def _init_weights(self) -> None:
        """mamba-ssm's ``_init_weights`` (no MLP, one residual per layer): embedding ~ N(0, 0.02);
        the mixers' in_proj / out_proj biases zero (Mamba-1's dt_proj keeps its own init);
        out_proj kaiming-uniform scaled by 1/sqrt(n_layer) (prenorm residual rescale)."""
        nn.init.normal_(self.embedding.weight, std=0.02)
        for mixer in self._mixers():
            for linear in (mixer.in_proj, mixer.out_proj):
                if linear.bias is not None:
                    nn.init.zeros_(linear.bias)
            nn.init.kaiming_uniform_(mixer.out_proj.weight, a=math.sqrt(5))
            mixer.out_proj.weight /= math.sqrt(self.config.n_layer)

    @property
    def impl(self) -> str:
        """The scan implementation every layer uses; assignable."""
        return self._impl

    @impl.setter
    def impl(self, value: str) -> None:
        self._check_impl(value)
        self._impl = value
        for mixer in self._mixers():
            mixer.impl = value

    def _forward(
        self,
        input_ids: torch.Tensor,
        state: MambaState | None,
        *block_args: Any,
        inplace: bool = False,
    ) -> tuple[torch.Tensor, MambaState]:
        """The subclass's ``forward``: embed, run every block from its layer of ``state`` (with
        ``block_args`` after the states), norm, head; logits cut to ``vocab_size``. With
        ``inplace`` each layer writes its new states into ``state``'s (Note [in-place decode] in
        ``ssmscan.models.mamba``) and ``state`` itself is returned."""
        if state is not None and state.n_layer != len(self.layers):
            raise ValueError(
                f"state covers {state.n_layer} layers; the model has {len(self.layers)}"
            )
        if inplace and state is None:
            raise ValueError("inplace=True writes the new state into the given one: pass state")
        # passed only when set, so a block or mixer whose forward was replaced with the
        # pre-``inplace`` signature keeps working in every other call
        block_kwargs = {"inplace": True} if inplace else {}
        hidden = self.embedding(input_ids)
        conv_states: list[torch.Tensor] = []
        ssm_states: list[torch.Tensor] = []
        if fused_inference(hidden, self.norm_f.weight):  # Note [fused inference]
            hidden = self._fused_layers(
                hidden, state, block_args, block_kwargs, conv_states, ssm_states
            )
        else:
            for i, block in enumerate(self.layers):
                conv_state = state.conv_states[i] if state is not None else None
                ssm_state = state.ssm_states[i] if state is not None else None
                hidden, conv_state, ssm_state = block(
                    hidden, conv_state, ssm_state, *block_args, **block_kwargs
                )
                conv_states.append(conv_state)
                ssm_states.append(ssm_state)
            hidden = self.norm_f.in_weight_dtype(hidden)
        logits = self.lm_head(hidden)
        if self.config.padded_vocab_size != self.config.vocab_size:
            logits = logits[..., : self.config.vocab_size]
        if inplace:
            assert state is not None
            return logits, state
        return logits, MambaState(tuple(conv_states), tuple(ssm_states))

    def _fused_layers(
        self,
        hidden: torch.Tensor,
        state: MambaState | None,
        block_args: tuple[Any, ...],
        block_kwargs: dict[str, Any],
        conv_states: list[torch.Tensor],
        ssm_states: list[torch.Tensor],
    ) -> torch.Tensor:
        """The blocks and the final norm with each residual add fused into the next norm
        (``ssmscan::add_rms_norm``, mamba-ssm's ``prenorm=True`` layout): the blocks' own math
        (``h + mixer(norm(h))``, float32 residual with ``residual_in_fp32``) with one kernel per
        add and norm. Appends each layer's states; returns the final norm's output."""
        residual, mixed = hidden, None
        for i, block in enumerate(self.layers):
            norm = cast(RMSNorm, block.norm)
            if mixed is None:
                normed = norm.in_weight_dtype(residual)
            else:
                normed, residual = torch.ops.ssmscan.add_rms_norm(
                    mixed, residual, norm.weight, norm.eps
                )
            if block.residual_in_fp32 and residual.dtype in (torch.float16, torch.bfloat16):
                residual = residual.float()
            conv_state = state.conv_states[i] if state is not None else None
            ssm_state = state.ssm_states[i] if state is not None else None
            mixer = cast(nn.Module, block.mixer)
            mixed, conv_state, ssm_state = mixer(
                normed, conv_state, ssm_state, *block_args, **block_kwargs
            )
            conv_states.append(conv_state)
            ssm_states.append(ssm_state)
        if mixed is None:
            return self.norm_f.in_weight_dtype(residual)
        normed, _ = torch.ops.ssmscan.add_rms_norm(
            mixed, residual, self.norm_f.weight, self.norm_f.eps
        )
        return normed

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
            >>> from ssmscan.models import Mamba2Config, Mamba2LM, build_model
            >>> model = build_model("tiny").eval()
            >>> g = torch.Generator().manual_seed(0)
            >>> out = model.generate(torch.tensor([[1, 2, 3]]), 4, temperature=0.8, top_k=20,
            ...     generator=g)
            >>> out.shape
            torch.Size([1, 7])
            >>> model = Mamba2LM(Mamba2Config.preset("tiny")).eval()
            >>> model.generate(torch.tensor([[1, 2, 3]]), 4).shape
            torch.Size([1, 7])
        """
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0; got {max_new_tokens}")
        if temperature is not None and temperature < 0:
            raise ValueError(f"temperature must be None or >= 0; got {temperature}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be None or >= 1; got {top_k}")
        tokens = [input_ids]
        if max_new_tokens == 0:
            return input_ids
        logits, state = self(input_ids)
        for i in range(max_new_tokens):
            next_ids = _pick(logits[:, -1].float(), temperature, top_k, generator)
            tokens.append(next_ids)
            if i + 1 < max_new_tokens:
                logits, state = self(next_ids, state)
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
