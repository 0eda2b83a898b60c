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


class SSDBlock(nn.Module):
    """A small Mamba-2-style block: in-projection to (z, x, B, C, dt), causal depthwise conv1d
    over (x, B, C), the SSD scan (grouped B/C, D, gate z, dt bias and softplus), out-projection.
    Seeded; (batch, L, d_model) -> (batch, L, d_model)."""

    def __init__(
        self,
        d_model: int = 16,
        nheads: int = 4,
        headdim: int = 8,
        ngroups: int = 2,
        d_state: int = 8,
        d_conv: int = 4,
        chunk_size: int | None = None,
    ):
        super().__init__()
        torch.manual_seed(0)
        self.nheads, self.headdim, self.ngroups, self.d_state = nheads, headdim, ngroups, d_state
        self.chunk_size = chunk_size
        d_inner = nheads * headdim
        self.d_xbc = d_inner + 2 * ngroups * d_state
        self.in_proj = nn.Linear(d_model, d_inner + self.d_xbc + nheads)
        self.conv = nn.Conv1d(self.d_xbc, self.d_xbc, d_conv, groups=self.d_xbc, padding=d_conv - 1)
        self.dt_bias = nn.Parameter(torch.log(torch.expm1(torch.rand(nheads) * 0.09 + 0.01)))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, nheads + 1, dtype=torch.float32)))
        self.D = nn.Parameter(torch.rand(nheads) + 0.5)
        self.out_proj = nn.Linear(d_inner, d_model)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        batch, L, _ = u.shape
        d_inner = self.nheads * self.headdim
        z, xbc, dt = self.in_proj(u).split([d_inner, self.d_xbc, self.nheads], dim=-1)
        xbc = F.silu(self.conv(xbc.transpose(1, 2))[..., :L].transpose(1, 2))
        gn = self.ngroups * self.d_state
        x, B, C = xbc.split([d_inner, gn, gn], dim=-1)
        y = ssmscan.ssd_scan(
            x.reshape(batch, L, self.nheads, self.headdim),
            dt,
            -torch.exp(self.A_log),
            B.reshape(batch, L, self.ngroups, self.d_state),
            C.reshape(batch, L, self.ngroups, self.d_state),
            chunk_size=self.chunk_size,
            D=self.D,
            z=z.reshape(batch, L, self.nheads, self.headdim),
            dt_bias=self.dt_bias,
            dt_softplus=True,
        )
        return self.out_proj(y.reshape(batch, L, d_inner))
