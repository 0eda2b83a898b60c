"""Peak memory of ssd_scan's CPU forward+backward: the backward keeps the chunk states entering
each chunk and a block of chunks' temporaries, never all chunks' decay matrices or state
gradients (Note [SSD chunked backward]), so one training step holds at most twice the bytes of
its inputs and outputs beside them."""

from __future__ import annotations

import pytest
import torch

import ssmscan
from ssmscan.testing.memory import cpu_peak_bytes


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# Mamba-2's head shape (headdim 64, dstate 128, chunk 64) at 16 chunks, so that the backward's
# blocks of chunks are a fraction of the sequence as at real lengths; before the backward was
# blocked these steps held 2.6x and 3.2x their inputs and outputs, now about 1.5x and 1.8x.
@pytest.mark.parametrize(
    "L, gated",
    [(1024, False), (1000, True)],
    ids=["B1-L1024-H8-P64-N128-Dhead-dtbias", "B1-L1000-H8-P64-N128-z-packed"],
)
def test_forward_backward_peak_within_twice_inputs_and_outputs(L, gated, ssd_inputs):
    kw = ssd_inputs(batch=1, L=L, nheads=8, headdim=64, ngroups=1, dstate=128, dt_bias=True,
                    dt_softplus=True, z=gated, seq_idx=gated)  # fmt: skip
    tensors = {k: v for k, v in kw.items() if isinstance(v, torch.Tensor)}
    with torch.no_grad():
        out, final = ssmscan.ssd_scan(**kw, chunk_size=64, return_final_states=True)
    g = torch.Generator().manual_seed(1)
    gy = torch.randn(out.shape, generator=g)
    gf = torch.randn(final.shape, generator=g)

    def step():
        leaves = {
            k: v.clone().requires_grad_()
            if isinstance(v, torch.Tensor) and v.is_floating_point()
            else v
            for k, v in kw.items()
        }
        o, f = ssmscan.ssd_scan(**leaves, chunk_size=64, return_final_states=True)
        torch.autograd.backward([o, f], [gy, gf])

    # inputs and outputs of the step: the inputs, out and final state, the incoming gradients
    # of out and final and the gradient of every input (the inputs' bytes again)
    io = 2 * (_nbytes(*tensors.values()) + _nbytes(out, final))
    peak = cpu_peak_bytes(step)
    assert peak > 0.5 * io  # the step's own results are seen
    assert peak <= 2 * io, f"peak {peak / io:.2f}x inputs+outputs > 2x"
