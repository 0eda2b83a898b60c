"""A bf16 Mamba-2 block's gradients against its float64 twin on the GPU, with ssmscan's SSD
kernels and with mamba-ssm's ``mamba_chunk_scan_combined`` (chunk 256) in their place: whether a
miss of the bf16 tolerance is the kernels' or the block's.

The block is ``tests/models/test_mamba2.py``'s ``test_gpu_compiled_training_step_of_a_block``'s
(d_model 256, headdim 64, d_state 128, batch 2), run eagerly; the loss is the mean square of its
output. Prints, per scan, length and seed, every gradient's relative error (max-normalized) and
the worst.

    PYTHONPATH=src python benchmarks/ssd_scan/block_errors.py [--mamba-src DIR]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import sys

import torch

from ssmscan.models import Mamba2Config
from ssmscan.models import mamba2 as mamba2_module
from ssmscan.models.mamba2 import Mamba2Block
from ssmscan.testing.compare import rel_error

sys.path.insert(0, os.path.dirname(__file__))
from bench_gpu import mamba_fn  # the sdist import, shared with the benchmark


def theirs_in_place_of(ours):
    """An ``ssd_scan`` stand-in that runs mamba-ssm's kernels (the float64 twin keeps ours)."""
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    def scan(x, dt, A, B, C, chunk_size=None, D=None, z=None, dt_bias=None,
             initial_states=None, seq_idx=None, dt_softplus=False,
             dt_limit=(0.0, float("inf")), return_final_states=False, impl="auto"):  # fmt: skip
        if x.dtype == torch.float64:
            return ours(x, dt, A, B, C, chunk_size=chunk_size, D=D, z=z, dt_bias=dt_bias,
                        initial_states=initial_states, seq_idx=seq_idx, dt_softplus=dt_softplus,
                        dt_limit=dt_limit, return_final_states=return_final_states, impl=impl)  # fmt: skip
        return mamba_chunk_scan_combined(x, dt, A, B, C, 256, D=D, z=z, dt_bias=dt_bias,
                                         initial_states=initial_states, seq_idx=seq_idx,
                                         dt_softplus=dt_softplus, dt_limit=dt_limit,
                                         return_final_states=return_final_states)  # fmt: skip

    return scan


def block_errors(seed, length):
    """{"loss" or parameter name: relative error} of one bf16 step against the float64 twin."""
    cfg = dataclasses.replace(Mamba2Config.preset("tiny"), d_model=256, d_state=128, headdim=64,
                              ngroups=1, chunk_size=64)  # fmt: skip
    torch.manual_seed(seed)
    block = Mamba2Block(cfg).cuda().to(torch.bfloat16)
    twin = copy.deepcopy(block).double()
    h = torch.randn(2, length, cfg.d_model, device="cuda", dtype=torch.bfloat16)

    def loss_of(model, x):
        out, _, _ = model(x)
        return out.to(torch.float64 if x.dtype == torch.float64 else torch.float32).square().mean()

    want = loss_of(twin, h.double())
    want.backward()
    got = loss_of(block, h)
    got.backward()
    errs = {"loss": rel_error(got.detach(), want.detach())}
    for (name, p), q in zip(twin.named_parameters(), block.parameters()):
        errs[name] = rel_error(q.grad, p.grad)
    return errs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mamba-src", default="/tmp/mb/mamba_ssm-2.3.2.post1")
    ap.add_argument("--lengths", nargs="*", type=int, default=[301, 1000])
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    a = ap.parse_args()
    ours = mamba2_module.ssd_scan
    scans = {"ssmscan": ours}
    _, why = mamba_fn(a.mamba_src)
    if why is None:
        scans["mamba-ssm"] = theirs_in_place_of(ours)
    else:
        print(f"mamba-ssm: not available ({why})")
    try:
        for name, scan in scans.items():
            mamba2_module.ssd_scan = scan
            for length in a.lengths:
                for seed in a.seeds:
                    errs = block_errors(seed, length)
                    worst = max(errs, key=errs.get)
                    print(f"{name} L {length} seed {seed}: worst {worst} {errs[worst]:.2e}; "
                          + " ".join(f"{k}={v:.2e}" for k, v in errs.items()), flush=True)  # fmt: skip
    finally:
        mamba2_module.ssd_scan = ours


if __name__ == "__main__":
    main()
