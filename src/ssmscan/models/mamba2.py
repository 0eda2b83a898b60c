"""Mamba-2 on ssmscan ops: ``GatedRMSNorm``, ``Mamba2Mixer``, ``Mamba2Block``.

The layer math and parameter names follow mamba-ssm's ``Mamba2`` (``d_ssm = d_inner``, no gated
MLP): ``in_proj``, ``conv1d``, ``dt_bias``, ``A_log``, ``D``, ``norm.weight``, ``out_proj``.

    zxbcdt     = in_proj(u)                      split as (z, xBC, dt): d_inner, conv_dim, nheads
    xBC        = silu(causal depthwise conv1d(xBC))   split as (x, B, C): d_inner, G*N, G*N
    y          = ssd_scan(x, dt, A = -exp(A_log), B, C, D, dt_bias, softplus, dt_limit)
    out        = out_proj(norm(y * silu(z)))     (grouped RMSNorm, mamba-ssm's
                                                  norm_before_gate=False)

Prefill, chunked prefill and decode share one forward, as ``MambaMixer`` (Note [conv state] in
``ssmscan.models.mamba``; here the convolution runs over the ``conv_dim`` channels of
``(x, B, C)``):

- ``conv_state=None``: zero conv/SSM state, the whole input through ``ssmscan.ssd_scan``.
- a state and L > 1 (a chunk of a longer prefill): the convolution over ``cat(conv_state, xBC)``
  and the scan from ``initial_states=ssm_state``.
- a state and L == 1 (decode, no ``seq_idx``): conv-state roll plus
  ``ssmscan::selective_state_update`` in Mamba-2's layout (4-D state, A / dt / D / dt_bias
  expanded over headdim as zero-stride views).

Note [packed conv]: with ``seq_idx`` several sequences share one row. ``segment_ids(seq_idx)``
numbers them (0 for tokens continuing the incoming state, exactly as ``ssd_scan`` decides it),
and tap k of the convolution at time t reads input s = t - (d_conv - 1) + k only when s lies in
t's sequence (inputs from the conv state count as sequence 0), so the convolution never mixes
sequences. The returned conv state keeps only the inputs of the row's last sequence (zero
elsewhere), as a fresh prefill of that sequence alone would leave it; with the SSM state, which
``ssd_scan`` also returns for the last sequence, decoding continues the last packed sequence.
"""

from __future__ import annotations

import math
from typing import get_args

import torch
import torch.nn.functional as F
from torch import nn

from ssmscan.models.config import Mamba2Config
from ssmscan.models.inference import fused_inference
from ssmscan.models.mamba import RMSNorm
from ssmscan.models.state import check_inplace_states, write_states
from ssmscan.ops.causal_conv1d import op as _causal_conv1d_op  # noqa: F401  (registers the op)
from ssmscan.ops.conv1d_step.api import conv1d_step_
from ssmscan.ops.rms_norm import op as _rms_norm_op  # noqa: F401  (registers the ops)
from ssmscan.ops.selective_state_update.api import selective_state_update
from ssmscan.ops.selective_state_update.reference import selective_state_update_reference
from ssmscan.ops.ssd_scan.api import Impl, ssd_scan
from ssmscan.ops.ssd_scan.common import process_dt, segment_ids

_IMPLS: tuple[str, ...] = get_args(Impl)


def _check_impl(impl: str) -> None:
    if impl not in _IMPLS:
        raise ValueError(f"impl must be one of {_IMPLS}; got {impl!r}")


class GatedRMSNorm(nn.Module):
    """mamba-ssm's gated, grouped RMSNorm (``layernorm_gated.RMSNorm``), in float32, returned in
    x's dtype: ``norm(x * silu(z)) * weight`` (``norm_before_gate=False``) or
    ``norm(x) * weight * silu(z)``, each group of ``group_size`` channels normalised on its own.

    Args:
        dim: size of the last dimension.
        eps: added to the mean square.
        group_size: channels per group (divides ``dim``); None is one group.
        norm_before_gate: normalise before gating (mamba-ssm's ``Mamba2`` uses False).

    Example:
        >>> import torch
        >>> from ssmscan.models.mamba2 import GatedRMSNorm
        >>> norm = GatedRMSNorm(4, group_size=2)
        >>> norm(torch.tensor([[1.0, 1.0, 3.0, 3.0]]), torch.full((1, 4), 30.0))
        tensor([[1., 1., 1., 1.]], grad_fn=<MulBackward0>)
    """

    def __init__(
        self,
        dim: int,
        eps: float = 1e-5,
        group_size: int | None = None,
        norm_before_gate: bool = False,
    ) -> None:
        super().__init__()
        group_size = dim if group_size is None else group_size
        if group_size < 1 or dim % group_size:
            raise ValueError(f"group_size must divide dim={dim}; got {group_size}")
        self.eps, self.group_size, self.norm_before_gate = eps, group_size, norm_before_gate
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        """x, z (..., dim) -> (..., dim) in x's dtype (float32 arithmetic; float64 for float64).
        One fused kernel on CUDA without gradients (Note [fused inference] in
        ``ssmscan.models.inference``)."""
        if fused_inference(x, z, self.weight):
            return torch.ops.ssmscan.gated_rms_norm(
                x, z, self.weight, self.eps, self.group_size, self.norm_before_gate
            )
        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        h = x.to(cdt)
        if z is not None and not self.norm_before_gate:
            h = h * F.silu(z.to(cdt))
        g = h.unflatten(-1, (-1, self.group_size))
        h = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)).flatten(-2)
        h = h * self.weight.to(cdt)
        if z is not None and self.norm_before_gate:
            h = h * F.silu(z.to(cdt))
        return h.to(x.dtype)

    def extra_repr(self) -> str:
        return (
            f"{self.weight.shape[0]}, eps={self.eps}, group_size={self.group_size}, "
            f"norm_before_gate={self.norm_before_gate}"
        )


def _upcast(p: torch.Tensor) -> torch.Tensor:
    """A parameter in the scan's state dtype: float32, or float64 for a float64 model."""
    return p if p.dtype == torch.float64 else p.float()


def _check_seq_idx(seq_idx: torch.Tensor, batch: int, length: int) -> None:
    if not isinstance(seq_idx, torch.Tensor):
        raise TypeError(f"seq_idx must be a tensor or None; got {type(seq_idx).__name__}")
    if tuple(seq_idx.shape) != (batch, length) or seq_idx.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"seq_idx must be a ({batch}, {length}) (batch, L) int32/int64 tensor; got shape "
            f"{tuple(seq_idx.shape)}, dtype {seq_idx.dtype}, device {seq_idx.device}"
        )


class Mamba2Mixer(nn.Module):
    """The Mamba-2 mixer (mamba-ssm's ``Mamba2``): in_proj -> (z, xBC, dt); causal depthwise conv1d
    + SiLU on xBC; SSD scan (``ssmscan.ssd_scan``); gated grouped RMSNorm; out_proj.

    Args:
        config: the model's ``Mamba2Config``.
        impl: scan implementation passed to ``ssmscan.ssd_scan`` (``"auto"``, ``"cpu"``,
            ``"triton"``, ``"reference"``); ``"reference"`` also decodes with the reference step.

    Example:
        >>> import torch
        >>> from ssmscan.models import Mamba2Config
        >>> from ssmscan.models.mamba2 import Mamba2Mixer
        >>> mixer = Mamba2Mixer(Mamba2Config.preset("tiny"))
        >>> out, conv_state, ssm_state = mixer(torch.randn(2, 7, 64))
        >>> out.shape, conv_state.shape, ssm_state.shape
        (torch.Size([2, 7, 64]), torch.Size([2, 192, 4]), torch.Size([2, 8, 16, 16]))
    """

    def __init__(self, config: Mamba2Config, impl: Impl = "auto") -> None:
        super().__init__()
        _check_impl(impl)
        self.impl: Impl = impl
        self.d_inner, self.d_state, self.d_conv = config.d_inner, config.d_state, config.d_conv
        self.nheads, self.headdim, self.ngroups = config.nheads, config.headdim, config.ngroups
        self.conv_dim, self.chunk_size = config.conv_dim, config.chunk_size
        self.dt_limit = (float(config.dt_limit[0]), float(config.dt_limit[1]))
        self.rmsnorm, self.D_has_hdim = config.rmsnorm, config.D_has_hdim
        self.in_proj = nn.Linear(config.d_model, config.d_in_proj, bias=config.bias)
        self.conv1d = nn.Conv1d(
            self.conv_dim,
            self.conv_dim,
            kernel_size=config.d_conv,
            groups=self.conv_dim,
            padding=config.d_conv - 1,
            bias=config.conv_bias,
        )
        self.dt_bias = nn.Parameter(torch.empty(self.nheads))
        self.A_log = nn.Parameter(torch.empty(self.nheads))
        self.D = nn.Parameter(torch.empty(self.d_inner if config.D_has_hdim else self.nheads))
        self.norm: GatedRMSNorm | None = None
        if config.rmsnorm:
            self.norm = GatedRMSNorm(
                self.d_inner,
                eps=config.rms_norm_eps,
                group_size=self.d_inner // config.ngroups,
                norm_before_gate=False,
            )
        self.out_proj = nn.Linear(self.d_inner, config.d_model, bias=config.bias)
        self._init_ssm_parameters(config)

    @torch.no_grad()
    def _init_ssm_parameters(self, config: Mamba2Config) -> None:
        """mamba-ssm's ``Mamba2`` init: conv weight ~ U(-conv_init, conv_init) when set;
        dt_bias = softplus^-1(dt), dt log-uniform in [dt_min, dt_max] clamped at the floor;
        A_log = log(A), A ~ U(A_init_range); D = 1."""
        if config.conv_init is not None:
            nn.init.uniform_(self.conv1d.weight, -config.conv_init, config.conv_init)
        log_min, log_max = math.log(config.dt_min), math.log(config.dt_max)
        dt = torch.exp(torch.rand(self.nheads) * (log_max - log_min) + log_min)
        dt = dt.clamp(min=config.dt_init_floor)
        self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse of softplus
        A = torch.empty(self.nheads, dtype=torch.float32).uniform_(*config.A_init_range)
        self.A_log.copy_(torch.log(A))
        self.D.fill_(1.0)

    def _D(self) -> torch.Tensor:
        """D as the scan takes it: (nheads, headdim) or (nheads,), in the state dtype."""
        D = _upcast(self.D)
        return D.view(self.nheads, self.headdim) if self.D_has_hdim else D

    def forward(
        self,
        hidden_states: torch.Tensor,
        conv_state: torch.Tensor | None = None,
        ssm_state: torch.Tensor | None = None,
        seq_idx: torch.Tensor | None = None,
        inplace: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mix a chunk of L tokens, continuing from the given states (zero when None).

        Args:
            hidden_states: (batch, L, d_model).
            conv_state: (batch, conv_dim, d_conv) in the input dtype, or None.
            ssm_state: (batch, nheads, headdim, d_state) float32 (float64 for float64 inputs), or
                None.
            seq_idx: optional (batch, L) int32/int64 sequence index of each token (packed
                sequences, Note [packed conv]); nondecreasing along L, as ``ssd_scan`` expects.
            inplace: write the states after the chunk into ``conv_state`` and ``ssm_state``
                (both required) and return those tensors (Note [in-place decode] in
                ``ssmscan.models.mamba``).

        Returns:
            ``(out (batch, L, d_model), conv_state, ssm_state)``, the states after the chunk (of
            the last sequence of each row with ``seq_idx``); fresh tensors, the inputs are not
            modified, unless ``inplace``.
        """
        batch, length, _ = hidden_states.shape
        if seq_idx is not None:
            _check_seq_idx(seq_idx, batch, length)
        check_inplace_states(inplace, conv_state, ssm_state)
        z, xBC, dt = torch.split(
            self.in_proj(hidden_states), [self.d_inner, self.conv_dim, self.nheads], dim=-1
        )
        if conv_state is not None and length == 1 and ssm_state is not None and seq_idx is None:
            return self._step(z[:, 0], xBC[:, 0], dt[:, 0], conv_state, ssm_state, inplace)
        w, b = self.conv1d.weight, self.conv1d.bias
        if seq_idx is None and fused_inference(xBC, conv_state, w, b):
            # Note [fused inference]: one kernel reads xBC in place, the state as its padding
            xBC, new_conv_state = torch.ops.ssmscan.causal_conv1d(xBC, conv_state, w[:, 0], b, True)
        else:
            if conv_state is None:
                conv_state = xBC.new_zeros(batch, self.conv_dim, self.d_conv)
            # Note [conv state] (ssmscan.models.mamba)
            xpad = torch.cat([conv_state.to(xBC.dtype), xBC.transpose(1, 2)], dim=-1)
            new_conv_state = xpad[:, :, -self.d_conv :]
            if seq_idx is None:
                xBC = F.conv1d(xpad[:, :, 1:], w, b, groups=self.conv_dim)
                new_conv_state = new_conv_state.contiguous()
            else:
                xBC, new_conv_state = self._packed_conv(xpad, seq_idx)
            xBC = F.silu(xBC).transpose(1, 2)  # (batch, L, conv_dim)
        x, B, C = torch.split(
            xBC, [self.d_inner, self.ngroups * self.d_state, self.ngroups * self.d_state], dim=-1
        )
        heads = (batch, length, self.nheads, self.headdim)
        groups = (batch, length, self.ngroups, self.d_state)
        y, new_ssm_state = ssd_scan(
            x.reshape(heads),
            dt,
            -torch.exp(_upcast(self.A_log)),
            B.reshape(groups),
            C.reshape(groups),
            chunk_size=self.chunk_size,
            D=self._D(),
            z=None if self.rmsnorm else z.reshape(heads),
            dt_bias=_upcast(self.dt_bias),
            initial_states=ssm_state,
            seq_idx=seq_idx,
            dt_softplus=True,
            dt_limit=self.dt_limit,
            return_final_states=True,
            impl=self.impl,
        )
        y = y.reshape(batch, length, self.d_inner)
        if self.norm is not None:
            y = self.norm(y, z)
        return write_states(
            inplace, (self.out_proj(y), new_conv_state, new_ssm_state), conv_state, ssm_state
        )

    def _packed_conv(
        self, xpad: torch.Tensor, seq_idx: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Note [packed conv]. xpad (batch, conv_dim, d_conv + L) -> (conv output (batch,
        conv_dim, L) before the activation, next conv state (batch, conv_dim, d_conv))."""
        K, L = self.d_conv, seq_idx.shape[1]
        seg = segment_ids(seq_idx)  # (batch, L); the state's inputs are sequence 0
        seg_pad = torch.cat([seg.new_zeros(seg.shape[0], K), seg], dim=1)  # aligned with xpad
        w = self.conv1d.weight[:, 0, :]  # (conv_dim, K)
        out = torch.zeros_like(xpad[:, :, K:])
        for k in range(K):  # tap k at time t reads xpad[:, :, t + 1 + k]
            same = (seg_pad[:, 1 + k : 1 + k + L] == seg)[:, None, :]
            out = out + w[:, k, None] * xpad[:, :, 1 + k : 1 + k + L] * same.to(xpad.dtype)
        if self.conv1d.bias is not None:
            out = out + self.conv1d.bias[:, None]
        last = (seg_pad[:, -K:] == seg[:, -1:])[:, None, :]  # inputs of each row's last sequence
        return out, xpad[:, :, -K:] * last.to(xpad.dtype)

    def _step(
        self,
        z: torch.Tensor,
        xBC: torch.Tensor,
        dt: torch.Tensor,
        conv_state: torch.Tensor,
        ssm_state: torch.Tensor,
        inplace: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decode step; z (batch, d_inner), xBC (batch, conv_dim), dt (batch, nheads); the
        states updated where they are with ``inplace`` (Note [in-place decode])."""
        batch = xBC.shape[0]
        H, P, N, G = self.nheads, self.headdim, self.d_state, self.ngroups
        w, bias = self.conv1d.weight[:, 0, :], self.conv1d.bias
        fused = fused_inference(xBC, conv_state, w, bias)  # Note [fused inference]
        if fused and inplace:
            xBC, new_conv_state = conv1d_step_(xBC, conv_state, w, bias, True), conv_state
        elif fused:
            xBC, new_conv_state = torch.ops.ssmscan.conv1d_step(xBC, conv_state, w, bias, True)
        else:
            new_conv_state = torch.cat(
                [conv_state[:, :, 1:], xBC[:, :, None].to(conv_state.dtype)], dim=-1
            )
            xBC = (new_conv_state * w).sum(-1).to(xBC.dtype)
            if bias is not None:
                xBC = xBC + bias
            xBC = F.silu(xBC)
            if inplace:
                new_conv_state = conv_state.copy_(new_conv_state)
        x, B, C = torch.split(xBC, [self.d_inner, G * N, G * N], dim=-1)
        # the fused path hands the step kernel D and dt_bias in x's dtype: it upcasts what it
        # loads, so the results are the same without two cast kernels per step
        raw = fused and self.impl != "reference"

        def param(p: torch.Tensor) -> torch.Tensor:
            return p if raw and p.dtype == x.dtype else _upcast(p)

        A = -torch.exp(_upcast(self.A_log))[:, None, None].expand(H, P, N)
        dt_bias: torch.Tensor | None = param(self.dt_bias)[:, None].expand(H, P)
        softplus = True
        if self.dt_limit != (0.0, float("inf")):  # the step op has no clamp: apply it here
            dt = process_dt(dt[:, None], self.dt_bias, True, *self.dt_limit, A.dtype)[:, 0]
            dt, dt_bias, softplus = dt.to(x.dtype), None, False
        D = param(self.D)
        args = (
            ssm_state,
            x.reshape(batch, H, P),
            dt[:, :, None].expand(batch, H, P),
            A,
            B.reshape(batch, G, N),
            C.reshape(batch, G, N),
            D.view(H, P) if self.D_has_hdim else D[:, None].expand(H, P),
            None if self.rmsnorm else z.reshape(batch, H, P),
            dt_bias,
            softplus,
        )
        if self.impl == "reference":
            y, new_ssm_state = selective_state_update_reference(*args)
            if inplace:
                new_ssm_state = ssm_state.copy_(new_ssm_state)
        elif inplace:
            y, new_ssm_state = selective_state_update(*args), ssm_state
        else:
            y, new_ssm_state = torch.ops.ssmscan.selective_state_update(*args)
        y = y.reshape(batch, self.d_inner)
        if self.norm is not None:
            y = self.norm(y, z)
        return self.out_proj(y)[:, None, :], new_conv_state, new_ssm_state


class Mamba2Block(nn.Module):
    """Pre-norm residual Mamba-2 block: ``h + mixer(norm(h))`` (mamba-ssm's ``Block`` with
    RMSNorm and no MLP, ``d_intermediate=0``).

    Args:
        config: the model's ``Mamba2Config``.
        impl: scan implementation of the mixer (see ``Mamba2Mixer``).

    Example:
        >>> import torch
        >>> from ssmscan.models import Mamba2Block, Mamba2Config
        >>> block = Mamba2Block(Mamba2Config.preset("tiny"))
        >>> h, conv_state, ssm_state = block(torch.randn(1, 5, 64))
        >>> h.shape
        torch.Size([1, 5, 64])
    """

    def __init__(self, config: Mamba2Config, impl: Impl = "auto") -> None:
        super().__init__()
        self.residual_in_fp32 = config.residual_in_fp32
        self.norm = RMSNorm(config.d_model, eps=config.rms_norm_eps)
        self.mixer = Mamba2Mixer(config, impl=impl)

    def forward(
        self,
        hidden_states: torch.Tensor,
        conv_state: torch.Tensor | None = None,
        ssm_state: torch.Tensor | None = None,
        seq_idx: torch.Tensor | None = None,
        inplace: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Args and Returns as ``Mamba2Mixer.forward``; the output is the updated residual stream
        (float32 with ``residual_in_fp32``)."""
        residual = hidden_states
        if self.residual_in_fp32 and hidden_states.dtype in (torch.float16, torch.bfloat16):
            residual = hidden_states.float()
        mixed, conv_state, ssm_state = self.mixer(
            self.norm.in_weight_dtype(hidden_states),
            conv_state,
            ssm_state,
            seq_idx,
            **({"inplace": True} if inplace else {}),  # only when set, as ``LMBase._forward`` does
        )
        return residual + mixed, conv_state, ssm_state
