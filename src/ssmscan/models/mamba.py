"""Mamba-1 on ssmscan ops: ``RMSNorm``, ``MambaMixer``, ``MambaBlock``, ``MambaLM``.

The layer math and parameter names follow mamba-ssm's ``Mamba`` / ``MambaLMHeadModel`` (without the
``backbone.`` prefix): ``embedding``, ``layers.{i}.norm``, ``layers.{i}.mixer.{in_proj, conv1d,
x_proj, dt_proj, A_log, D, out_proj}``, ``norm_f``, ``lm_head``.

Prefill, chunked prefill and decode share one forward (Note [conv state]):

- ``state=None``: zero conv/SSM state, the whole input through ``ssmscan.selective_scan``
  (``return_last_state=True``), final states returned.
- a state and L > 1 (a chunk of a longer prefill): the convolution runs over
  ``cat(conv_state, x)`` and the scan starts from ``initial_state=ssm_state``.
- a state and L == 1 (decode): conv-state roll plus ``ssmscan::selective_state_update``.

Note [conv state]: the conv state holds the last ``d_conv`` inputs of the depthwise convolution
(mamba-ssm's layout), oldest first, zero where fewer tokens were seen. For a chunk x of length L,
``xpad = cat(conv_state, x)`` has length d_conv + L and output t of the causal convolution reads
``xpad[t + 1 : t + 1 + d_conv]``, so the chunk's outputs are a valid convolution over
``xpad[:, :, 1:]`` and the next conv state is ``xpad[:, :, -d_conv:]``. A zero conv state makes
this exactly the zero-padded causal convolution of a first chunk; a decode step is the same with
L = 1, written as a roll and a dot product.
"""

from __future__ import annotations

import math
from typing import get_args

import torch
import torch.nn.functional as F
from torch import nn

from ssmscan.models.config import MambaConfig
from ssmscan.models.inference import fused_inference, inference_only
from ssmscan.models.state import check_inplace_states, write_states
from ssmscan.ops.causal_conv1d import op as _causal_conv1d_op  # noqa: F401  (registers the op)
from ssmscan.ops.conv1d_step.api import conv1d_step_
from ssmscan.ops.rms_norm import op as _rms_norm_op  # noqa: F401  (registers the ops)
from ssmscan.ops.selective_scan.api import Impl, selective_scan
from ssmscan.ops.selective_state_update.api import selective_state_update
from ssmscan.ops.selective_state_update.reference import selective_state_update_reference

_IMPLS: tuple[str, ...] = get_args(Impl)


def _check_impl(impl: str) -> None:
    if impl not in _IMPLS:
        raise ValueError(f"impl must be one of {_IMPLS}; got {impl!r}")


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed in float32 and returned in x's dtype:
    ``weight * x / sqrt(mean(x**2) + eps)``.

    Args:
        dim: size of the last dimension.
        eps: added to the mean square.

    Example:
        >>> import torch
        >>> from ssmscan.models.mamba import RMSNorm
        >>> RMSNorm(4)(torch.full((1, 4), 2.0))
        tensor([[1.0000, 1.0000, 1.0000, 1.0000]], grad_fn=<MulBackward0>)
    """

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., dim) -> (..., dim) in x's dtype."""
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * normed).to(x.dtype)

    def in_weight_dtype(self, x: torch.Tensor) -> torch.Tensor:
        """``self(x.to(weight.dtype))``: the pre-norm of a block (x the residual stream, float32
        with ``residual_in_fp32``), in the weight's dtype. One fused kernel on CUDA without
        gradients (Note [fused inference] in ``ssmscan.models.inference``).

        Args:
            x: (..., dim) any float dtype.

        Returns:
            (..., dim) in the weight's dtype.

        Example:
            >>> import torch
            >>> from ssmscan.models.mamba import RMSNorm
            >>> RMSNorm(2).half().in_weight_dtype(torch.full((1, 2), 3.0)).dtype
            torch.float16
        """
        if fused_inference(x, self.weight):
            return torch.ops.ssmscan.rms_norm(x, self.weight, self.eps)
        return self(x.to(self.weight.dtype))

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


# Note [in-place decode]: by default a call returns fresh states and mutates nothing, so exported
# and compiled programs have no input/output aliasing (``ssmscan.models.state``). A decode loop
# replayed from a CUDA graph needs the opposite: the state lives in static buffers that every
# replay reads and writes. ``inplace=True`` (LM, block and mixer forwards) writes the new states
# into the given ones: a decode step's conv step and state update run their kernels in place
# (``conv1d_step_``, ``ssmscan.selective_state_update``, as mamba-ssm's decode does), so a
# captured step holds no state copies; other chunks (and the paths without those kernels) copy
# their new states in. The values are those of the functional call. Measured before it (H100,
# bf16, 130m, decode from a CUDA graph that copied the returned states back, two copies a
# layer): 0.66-0.86x mamba-ssm's tokens/s.

# Note [channel-major prefill]: the selective scan reads x, dt and z channel-major (batch, d_inner,
# L) with unit time stride, while ``nn.Linear`` writes token-major (batch, L, d_inner). Feeding the
# scan the transposes of token-major projections costs one transposing copy each of x, dt, z and
# the output (on an H100, 54% of the 130m model's batch-8 prefill: 18 of 33 ms). Inference
# outside tracing (``inference_only``: no gradient, not compiled or exported; any device) instead
# computes each projection as ``W @ xᵀ`` per sequence (a batched GEMM that reads its operands in
# either order, as mamba-ssm's ``mamba_inner_fn`` does): x and z come out channel-major, the
# convolution (``ssmscan::causal_conv1d``: its Triton kernel on CUDA, aten elsewhere) writes its
# output in its input's layout, x_proj and dt_proj run on them channel-major, and out_proj reads
# the scan's output transposed. The values are those of the token-major path (the same products,
# summed in a GEMM's order); only the layouts differ. Training and traced programs keep the
# token-major PyTorch modules, so their graphs are unchanged. Measured: H100 bf16 130m prefill at
# batch 8, L 2048, 0.46x -> 1.19x mamba-ssm's speed; CPU (2 cores, float32, 130m, batch 1) L 2048
# 3.43 -> 2.57 s, batch 4 L 256 1.49 -> 1.39 s, L 16 82 -> 87 ms.


def _linear_channel_major(
    weight: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``F.linear`` along the channel axis of a channel-major x: weight (m, k), x (batch, k, L)
    with either inner stride 1 -> (batch, m, L) contiguous (Note [channel-major prefill])."""
    y = torch.bmm(weight.expand(x.shape[0], -1, -1), x)
    return y if bias is None else y + bias[:, None]


class MambaMixer(nn.Module):
    """The Mamba-1 mixer: in_proj -> (x, z); causal depthwise conv1d + SiLU on x; x_proj -> (dt, B,
    C); dt_proj; selective scan (delta_bias = dt_proj.bias, softplus) gated by SiLU(z); out_proj.

    Args:
        config: the model's ``MambaConfig``.
        impl: scan implementation passed to ``ssmscan.selective_scan`` (``"auto"``, ``"cpu"``,
            ``"triton"``, ``"reference"``); ``"reference"`` also decodes with the reference step.

    Example:
        >>> import torch
        >>> from ssmscan.models import MambaConfig
        >>> from ssmscan.models.mamba import MambaMixer
        >>> mixer = MambaMixer(MambaConfig.preset("tiny"))
        >>> out, conv_state, ssm_state = mixer(torch.randn(2, 7, 64))
        >>> out.shape, conv_state.shape, ssm_state.shape
        (torch.Size([2, 7, 64]), torch.Size([2, 128, 4]), torch.Size([2, 128, 16]))
    """

    def __init__(self, config: MambaConfig, impl: Impl = "auto") -> None:
        super().__init__()
        _check_impl(impl)
        self.impl: Impl = impl
        self.d_inner, self.d_state = config.d_inner, config.d_state
        self.d_conv, self.dt_rank = config.d_conv, config.resolved_dt_rank
        d_inner, rank = self.d_inner, self.dt_rank
        self.in_proj = nn.Linear(config.d_model, 2 * d_inner, bias=config.bias)
        self.conv1d = nn.Conv1d(
            d_inner,
            d_inner,
            kernel_size=config.d_conv,
            groups=d_inner,
            padding=config.d_conv - 1,
            bias=config.conv_bias,
        )
        self.x_proj = nn.Linear(d_inner, rank + 2 * config.d_state, bias=False)
        self.dt_proj = nn.Linear(rank, d_inner, bias=True)
        self.A_log = nn.Parameter(torch.empty(d_inner, config.d_state))
        self.D = nn.Parameter(torch.empty(d_inner))
        self.out_proj = nn.Linear(d_inner, config.d_model, bias=config.bias)
        self._init_ssm_parameters(config)

    @torch.no_grad()
    def _init_ssm_parameters(self, config: MambaConfig) -> None:
        """mamba-ssm's init: dt_proj weight ~ U(-s, s) (or constant s), s = dt_scale/sqrt(dt_rank);
        dt_proj bias = softplus^-1(dt), dt log-uniform in [dt_min, dt_max] clamped at the floor;
        A_log = log(1..N) for every channel (S4D-real); D = 1."""
        std = self.dt_rank**-0.5 * config.dt_scale
        if config.dt_init == "constant":
            nn.init.constant_(self.dt_proj.weight, std)
        else:
            nn.init.uniform_(self.dt_proj.weight, -std, std)
        log_min, log_max = math.log(config.dt_min), math.log(config.dt_max)
        dt = torch.exp(torch.rand(self.d_inner) * (log_max - log_min) + log_min)
        dt = dt.clamp(min=config.dt_init_floor)
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse of softplus
        A = torch.arange(1, self.d_state + 1, dtype=torch.float32).repeat(self.d_inner, 1)
        self.A_log.copy_(torch.log(A))
        self.D.fill_(1.0)

    def forward(
        self,
        hidden_states: torch.Tensor,
        conv_state: torch.Tensor | None = None,
        ssm_state: torch.Tensor | None = None,
        inplace: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mix a chunk of L tokens, continuing from the given states (zero when None).

        Args:
            hidden_states: (batch, L, d_model).
            conv_state: (batch, d_inner, d_conv) in the input dtype, or None.
            ssm_state: (batch, d_inner, d_state) float32 (float64 for float64 inputs), or None.
            inplace: write the states after the chunk into ``conv_state`` and ``ssm_state``
                (both required) and return those tensors (Note [in-place decode]).

        Returns:
            ``(out (batch, L, d_model), conv_state, ssm_state)``, the states after the chunk (fresh
            tensors; the inputs are not modified, unless ``inplace``).
        """
        check_inplace_states(inplace, conv_state, ssm_state)
        batch, length, _ = hidden_states.shape
        decode = conv_state is not None and ssm_state is not None and length == 1
        params = (self.in_proj.weight, self.conv1d.weight, self.x_proj.weight, self.out_proj.weight)
        if not decode and inference_only(hidden_states, conv_state, ssm_state, *params):
            result = self._prefill_channel_major(hidden_states, conv_state, ssm_state)
            return write_states(inplace, result, conv_state, ssm_state)
        xz = self.in_proj(hidden_states).transpose(1, 2)  # (batch, 2 * d_inner, L)
        x, z = xz.chunk(2, dim=1)
        if decode:
            assert conv_state is not None and ssm_state is not None  # (decode says so)
            return self._step(x[:, :, 0], z[:, :, 0], conv_state, ssm_state, inplace)
        w, bias = self.conv1d.weight, self.conv1d.bias
        if conv_state is None:
            conv_state = x.new_zeros(batch, self.d_inner, self.d_conv)
        # Note [conv state]
        xpad = torch.cat([conv_state.to(x.dtype), x], dim=-1)
        new_conv_state = xpad[:, :, -self.d_conv :].contiguous()
        x = F.silu(F.conv1d(xpad[:, :, 1:], w, bias, groups=self.d_inner))
        dt, B, C = self._project(x.transpose(1, 2))  # (batch, L, ...)
        out, new_ssm_state = self._scan(
            x, dt.transpose(1, 2), B.transpose(1, 2), C.transpose(1, 2), z, ssm_state
        )
        result = (self.out_proj(out.transpose(1, 2)), new_conv_state, new_ssm_state)
        # in place, conv_state was given (check_inplace_states) and is the one to write
        return write_states(inplace, result, conv_state, ssm_state)

    def _scan(
        self,
        x: torch.Tensor,
        dt: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        z: torch.Tensor,
        ssm_state: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The selective scan of a chunk; x, dt, z (batch, d_inner, L), B, C (batch, N, L)."""
        out, last_state = selective_scan(
            x,
            dt,
            -torch.exp(self.A_log.float()),
            B.contiguous(),
            C.contiguous(),
            D=self.D.float(),
            z=z,
            delta_bias=self.dt_proj.bias.float(),
            delta_softplus=True,
            return_last_state=True,
            initial_state=ssm_state,
            impl=self.impl,
        )
        return out, last_state

    def _prefill_channel_major(
        self,
        hidden_states: torch.Tensor,
        conv_state: torch.Tensor | None,
        ssm_state: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``forward`` for a chunk of L tokens with every projection computed channel-major
        (Note [channel-major prefill]); the same math as the token-major path."""
        d_inner, rank, N = self.d_inner, self.dt_rank, self.d_state
        h_t = hidden_states.transpose(1, 2)  # (batch, d_model, L), a view
        w_in, b_in = self.in_proj.weight, self.in_proj.bias
        x = _linear_channel_major(w_in[:d_inner], h_t, None if b_in is None else b_in[:d_inner])
        z = _linear_channel_major(w_in[d_inner:], h_t, None if b_in is None else b_in[d_inner:])
        # one kernel reads x in place, the state as its padding, and writes x's layout back
        xt, new_conv_state = torch.ops.ssmscan.causal_conv1d(
            x.transpose(1, 2), conv_state, self.conv1d.weight[:, 0], self.conv1d.bias, True
        )
        x = xt.transpose(1, 2)  # (batch, d_inner, L), contiguous
        x_dbl = _linear_channel_major(self.x_proj.weight, x, self.x_proj.bias)
        dt = _linear_channel_major(self.dt_proj.weight, x_dbl[:, :rank], None)
        B, C = x_dbl[:, rank : rank + N], x_dbl[:, rank + N :]
        out, new_ssm_state = self._scan(x, dt, B, C, z, ssm_state)
        # (batch, L, d_model) = outᵀ · W_outᵀ: the GEMM reads out's transpose in place
        w_out = self.out_proj.weight
        y = torch.bmm(out.transpose(1, 2), w_out.t().expand(out.shape[0], -1, -1))
        if self.out_proj.bias is not None:
            y = y + self.out_proj.bias
        return y, new_conv_state, new_ssm_state

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (..., d_inner) -> dt (..., d_inner) without bias, B (..., N), C (..., N)."""
        dt, B, C = torch.split(self.x_proj(x), [self.dt_rank, self.d_state, self.d_state], dim=-1)
        return F.linear(dt, self.dt_proj.weight), B, C

    def _step(
        self,
        x: torch.Tensor,
        z: torch.Tensor,
        conv_state: torch.Tensor,
        ssm_state: torch.Tensor,
        inplace: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decode step; x, z (batch, d_inner). Note [conv state] with L = 1; the states
        updated where they are with ``inplace`` (Note [in-place decode])."""
        w, bias = self.conv1d.weight[:, 0, :], self.conv1d.bias
        fused = fused_inference(x, conv_state, w, bias)  # Note [fused inference]
        if fused and inplace:
            x, new_conv_state = conv1d_step_(x, conv_state, w, bias, True), conv_state
        elif fused:
            x, new_conv_state = torch.ops.ssmscan.conv1d_step(x, conv_state, w, bias, True)
        else:
            new_conv_state = torch.cat(
                [conv_state[:, :, 1:], x[:, :, None].to(conv_state.dtype)], -1
            )
            x = (new_conv_state * w).sum(-1).to(x.dtype)
            if bias is not None:
                x = x + bias
            x = F.silu(x)
            if inplace:
                new_conv_state = conv_state.copy_(new_conv_state)
        dt, B, C = self._project(x)
        # the fused path hands the step kernel D and dt_bias in x's dtype (it upcasts what it
        # loads, as for Mamba-2): the same results without two cast kernels a layer and step
        raw = fused and self.impl != "reference"

        def param(p: torch.Tensor) -> torch.Tensor:
            return p if raw and p.dtype == x.dtype else p.float()

        args = (ssm_state, x, dt, -torch.exp(self.A_log.float()), B, C, param(self.D), z,
                param(self.dt_proj.bias), True)  # fmt: skip
        if self.impl == "reference":
            y, new_ssm_state = selective_state_update_reference(*args)
            if inplace:
                new_ssm_state = ssm_state.copy_(new_ssm_state)
        elif inplace:
            y, new_ssm_state = selective_state_update(*args), ssm_state
        else:
            y, new_ssm_state = torch.ops.ssmscan.selective_state_update(*args)
        return self.out_proj(y)[:, None, :], new_conv_state, new_ssm_state


class MambaBlock(nn.Module):
    """Pre-norm residual Mamba block: ``h + mixer(norm(h))`` (mamba-ssm's ``Block`` with RMSNorm).

    Args:
        config: the model's ``MambaConfig``.
        impl: scan implementation of the mixer (see ``MambaMixer``).

    Example:
        >>> import torch
        >>> from ssmscan.models import MambaBlock, MambaConfig
        >>> block = MambaBlock(MambaConfig.preset("tiny"))
        >>> h, conv_state, ssm_state = block(torch.randn(1, 5, 64))
        >>> h.shape
        torch.Size([1, 5, 64])
    """

    def __init__(self, config: MambaConfig, impl: Impl = "auto") -> None:
        super().__init__()
        self.residual_in_fp32 = config.residual_in_fp32
        self.norm = RMSNorm(config.d_model, eps=config.rms_norm_eps)
        self.mixer = MambaMixer(config, impl=impl)

    def forward(
        self,
        hidden_states: torch.Tensor,
        conv_state: torch.Tensor | None = None,
        ssm_state: torch.Tensor | None = None,
        inplace: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Args and Returns as ``MambaMixer.forward``; the output is the updated residual stream
        (float32 with ``residual_in_fp32``)."""
        residual = hidden_states
        if self.residual_in_fp32 and hidden_states.dtype in (torch.float16, torch.bfloat16):
            residual = hidden_states.float()
        mixed, conv_state, ssm_state = self.mixer(
            self.norm.in_weight_dtype(hidden_states),
            conv_state,
            ssm_state,
            **({"inplace": True} if inplace else {}),  # only when set, as ``LMBase._forward`` does
        )
        return residual + mixed, conv_state, ssm_state
