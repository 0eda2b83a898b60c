"""Where does ``torch.compile(dynamic=True)`` of a selective-scan training step spend its time on a
GPU? Runs tests/ops/selective_scan's GPU compile test body with a Python stack dump of every thread
each ``--every`` seconds (faulthandler), so a hang or a slow phase shows where it is.

    PYTHONPATH=src python benchmarks/selective_scan/compile_dynamic_probe.py --every 60
"""

from __future__ import annotations

import argparse
import faulthandler
import sys
import time

import torch

import ssmscan  # noqa: F401  (registers the ops)
from ssmscan.testing import make_selective_scan_inputs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=float, default=60.0)
    ap.add_argument("--static", action="store_true", help="dynamic=False instead")
    a = ap.parse_args()
    faulthandler.dump_traceback_later(a.every, repeat=True, file=sys.stderr)
    kw = make_selective_scan_inputs(2, 64, 200, 16, dtype=torch.float32, device="cuda")
    A = kw["A"].clone().requires_grad_()

    def loss_fn(u, delta, B, C, z, A, D, delta_bias):
        out, last, _ = torch.ops.ssmscan.selective_scan_fwd(
            u, delta, A, B, C, D, z, delta_bias, None, True
        )
        return out.float().square().mean() + last.square().mean()

    fn = torch.compile(loss_fn, fullgraph=True, dynamic=not a.static)
    t0 = time.perf_counter()
    loss = fn(kw["u"], kw["delta"], kw["B"], kw["C"], kw["z"], A, kw["D"], kw["delta_bias"])
    t1 = time.perf_counter()
    print(f"forward compiled+ran in {t1 - t0:.1f} s", flush=True)
    loss.backward()
    torch.cuda.synchronize()
    print(f"backward compiled+ran in {time.perf_counter() - t1:.1f} s", flush=True)
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main()
