"""A small Mamba-style block for the export tests: in-projection, causal depthwise conv1d,
selective scan, gate, out-projection. Seeded; (batch, L, d_model) -> (batch, L, d_model)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import ssmscan


class ScanBlock(nn.Module):
    def __init__(self, d_model: int = 16, expand: int = 2, d_state: int = 8, d_conv: int = 4):
        super().__init__()
        torch.manual_seed(0)
        d_inner = expand * d_model
        self.d_state, self.dt_rank = d_state, math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, 2 * d_inner)
        self.conv = nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(d_inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, d_inner)
        with torch.no_grad():
            self.dt_proj.bias.copy_(torch.log(torch.expm1(torch.rand(d_inner) * 0.09 + 0.01)))
        a = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_inner, 1)
        self.A_log = nn.Parameter(torch.log(a))
        self.D = nn.Parameter(torch.ones(d_inner))
        self.out_proj = nn.Linear(d_inner, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        L = x.shape[1]
        u, z = self.in_proj(x).transpose(1, 2).chunk(2, dim=1)
        u = F.silu(self.conv(u)[..., :L])
        dt, B, C = self.x_proj(u.transpose(1, 2)).split(
            [self.dt_rank, self.d_state, self.d_state], dim=-1
        )
        delta = (dt @ self.dt_proj.weight.t()).transpose(1, 2)
        y = ssmscan.selective_scan(
            u,
            delta,
            -torch.exp(self.A_log),
            B.transpose(1, 2),
            C.transpose(1, 2),
            self.D,
            z,
            delta_bias=self.dt_proj.bias,
            delta_softplus=True,
        )
        return self.out_proj(y.transpose(1, 2))


def block_inputs(L: int, batch: int = 2, d_model: int = 16, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + L)
    return torch.randn(batch, L, d_model, generator=g)
