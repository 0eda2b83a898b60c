"""ssmscan's ``mamba_chunk_scan_combined`` beside mamba-ssm's own Triton implementation.

Runs mamba-ssm's ``mamba_chunk_scan_combined`` (its Triton kernels, loaded from its source as
``run_mamba_ssm_tests.py`` does: no CUDA extension needed) and ssmscan's drop-in on the same
inputs, and prints, per case, the relative error (``max|a - b| / max|b|``) of each result form
(out, final_states, varlen_states) between the two and of each against ssmscan's float64
reference. Without a GPU mamba-ssm's kernels run under Triton's CPU interpreter
(``TRITON_INTERPRET=1``, one autotune config, tiny sizes) and ssmscan's side on its CPU kernel;
with one both run on the GPU (mamba-ssm's kernels compiled, ssmscan's Triton SSD kernels).

Usage::

    python benchmarks/integrations/compare_mamba_ssm_ssd.py [--mamba-src DIR]

Measured 2026-12-05 (CPU interpreter, torch 2.13, triton 3.6, mamba-ssm 2.3.2.post1): every form
agrees to 1.3e-6 or better (ssmscan within 2e-7 of float64, mamba-ssm within 1.3e-6), except
the varlen state of a first sequence that ends inside the first chunk when ``initial_states`` is
given: mamba-ssm's ``chunk_state_varlen`` adds the carried state only for sequences that start
before their last chunk, so it leaves the initial state out there (1.0 from float64 in relative
terms; ssmscan 8e-8).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path

import torch

import ssmscan
from ssmscan.integrations.mamba_ssm import mamba_chunk_scan_combined as ours
from ssmscan.ops.ssd_scan.reference import ssd_scan_reference
from ssmscan.testing.triton_interpreter import patch_for_autotuned_kernels_on_cpu

ROOT = Path(__file__).resolve().parents[2]
F64 = torch.float64

# name -> (L, chunk_size, cu_seqlens or None, with initial states)
CASES = {
    "L37-Q16": (37, 16, None, True),
    "L64-Q16-packed-5,16,1,42": (64, 16, [0, 5, 21, 22, 64], False),
    "L64-Q16-packed-20,44-h0": (64, 16, [0, 20, 64], True),
    "L64-Q16-packed-5,59-h0": (64, 16, [0, 5, 64], True),
}


def _cpu_interpreter() -> None:
    """What mamba-ssm's Triton code needs to run on CPU tensors under the interpreter."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    patch_for_autotuned_kernels_on_cpu()


def _inputs(L: int, with_h0: bool, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    nheads, headdim, ngroups, dstate = 4, 8, 2, 16

    def rnd(*shape):
        return torch.randn(*shape, generator=g)

    kw = dict(
        x=rnd(1, L, nheads, headdim),
        dt=0.5 * rnd(1, L, nheads),
        A=-torch.exp(torch.rand(nheads, generator=g) * 2.7),
        B=rnd(1, L, ngroups, dstate),
        C=rnd(1, L, ngroups, dstate),
        D=rnd(nheads, headdim),
        z=rnd(1, L, nheads, headdim),
        dt_bias=torch.log(torch.expm1(0.001 + 0.1 * torch.rand(nheads, generator=g))),
    )
    if with_h0:
        kw["initial_states"] = rnd(1, nheads, headdim, dstate)
    return kw


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().cpu().to(F64), b.detach().cpu().to(F64)
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mamba-src",
        type=Path,
        default=Path(os.environ.get("MAMBA_SSM_SRC", "/tmp/mb/mamba_ssm-2.3.2.post1")),
    )
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        _cpu_interpreter()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run_mamba_ssm_tests import load_mamba_ssm

    load_mamba_ssm(args.mamba_src)
    theirs = importlib.import_module("mamba_ssm.ops.triton.ssd_combined").mamba_chunk_scan_combined

    print(f"mamba-ssm's Triton kernels on {device} ({'interpreter' if device == 'cpu' else 'compiled'})"
          f", ssmscan {ssmscan.__version__} on {device}, torch {torch.__version__}")  # fmt: skip
    print(f"{'case':28} {'form':14} {'ssmscan~mamba':>14} {'ssmscan~f64':>12} {'mamba~f64':>10}")
    for i, (name, (L, Q, cu, with_h0)) in enumerate(CASES.items()):
        kw = _inputs(L, with_h0, seed=i)
        opts: dict = dict(dt_softplus=True, dt_limit=(0.0, 0.08), return_final_states=True)
        seq_idx = None
        if cu is not None:
            seq_idx = torch.repeat_interleave(
                torch.arange(len(cu) - 1, dtype=torch.int32), torch.tensor(cu).diff()
            )[None]
            opts |= dict(seq_idx=seq_idx, cu_seqlens=torch.tensor(cu, dtype=torch.int32),
                         return_varlen_states=True)  # fmt: skip
        on_dev = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in opts.items()}
        kw_dev = {k: v.to(device) for k, v in kw.items()}
        mine = ours(**kw_dev, chunk_size=Q, **on_dev)
        other = theirs(**kw_dev, chunk_size=Q, **on_dev)
        k64 = {k: v.to(F64) for k, v in kw.items()}
        h0 = k64.pop("initial_states", None)
        ref_out, ref_final = ssd_scan_reference(
            **k64, initial_states=h0, seq_idx=seq_idx, dt_softplus=True, dt_limit=(0.0, 0.08),
            return_final_states=True,
        )  # fmt: skip
        refs = [ref_out, ref_final]
        if cu is not None:
            states = []
            for j in range(len(cu) - 1):
                piece = {k: v[:, cu[j] : cu[j + 1]] if v.dim() > 2 else v for k, v in k64.items()}
                start = h0 if j == 0 else None
                _, state = ssd_scan_reference(
                    **piece, initial_states=start, dt_softplus=True, dt_limit=(0.0, 0.08),
                    return_final_states=True,
                )  # fmt: skip
                states.append(state[0])
            refs.append(torch.stack(states))
        for form, a, b, r in zip(("out", "final_states", "varlen_states"), mine, other, refs):
            print(f"{name:28} {form:14} {_rel(a, b):14.2e} {_rel(a, r):12.2e} {_rel(b, r):10.2e}")


if __name__ == "__main__":
    main()
