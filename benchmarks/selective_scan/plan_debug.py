"""Replays against the normal path in the API's training step (the sequence of
``test_api_fast_path_equals_op_gpu``: a loss on the output and last state, then on the last state
only, fast path and op), each gradient's max difference, and what the backward's plan holds.

    PYTHONPATH=src:tests python benchmarks/selective_scan/plan_debug.py [--align BYTES] [--no-arena]

``--align``: ``launch_plan.ARENA_ALIGN``; ``--no-arena``: every allocation replayed as a tensor."""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
sys.path.insert(
    0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "ops", "selective_scan")
)

import ssmscan
from ssmscan.ops.common import launch_plan
from ssmscan.ops.selective_scan import eager, triton_bwd, triton_fwd


def main():
    from test_eager_path import _ARGS, _inputs, _loss_and_grads

    ap = argparse.ArgumentParser()
    ap.add_argument("--align", type=int, default=launch_plan.ARENA_ALIGN)
    ap.add_argument("--no-arena", action="store_true")
    ap.add_argument("--dtype", default="fp32")
    a = ap.parse_args()
    launch_plan.ARENA_ALIGN = a.align
    if a.no_arena:
        launch_plan._ALLOCS = set()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]

    def step(with_out, fast):
        eager.FAST_PATH = fast
        ins = _inputs("cuda", dtype, batch=2, dim=64, L=777, N=16)
        g = torch.Generator(device="cuda")
        g_out = (
            torch.randn(ins["u"].shape, generator=g.manual_seed(2), device="cuda")
            if with_out
            else None
        )
        g_last = torch.randn(2, 64, 16, generator=g.manual_seed(3), device="cuda")

        def api(t):
            return ssmscan.selective_scan(
                *(t[k] for k in _ARGS[:8]), delta_softplus=True, return_last_state=True,
                initial_state=t["initial_state"],
            )  # fmt: skip

        res = _loss_and_grads(api, ins, g_out, g_last)
        torch.cuda.synchronize()
        return res

    real_plan_init = launch_plan.Plan.__init__

    def dumping_init(self, rec, result):  # the raw record of every plan made
        print(f"record: {len(rec.steps)} steps, ok {rec.ok} {rec.why}")
        for st in rec.steps:
            if st[0] == "op":
                _, func, targs, _tkw, outs, _single, view = st
                ins = launch_plan._slots_in(targs)
                print(f"  op {func} {ins} -> {outs}{' view' if view else ''} roots "
                      f"{[rec.root[o] for o in outs]} ptrs {[hex(rec.ptr[o]) for o in outs]}")  # fmt: skip
            elif st[0] == "launch":
                print(f"  launch {st[2]} slots {launch_plan._slots_in(st[3])}")
            else:
                print(f"  {st[0]}")
        real_plan_init(self, rec, result)

    launch_plan.Plan.__init__ = dumping_init
    launch_plan.ENABLED = False
    ref = {w: step(w, True) for w in (True, False)}
    launch_plan.ENABLED = True
    for with_out, fast in [
        (True, True),
        (True, False),
        (False, True),
        (False, False),
        (False, True),
        (True, True),
    ]:
        o, last, gr = step(with_out, fast)
        r = ref[with_out]
        diffs = {k: (gr[k].float() - r[2][k].float()).abs().max().item() for k in gr}
        bad = {k: f"{v:.2e}" for k, v in diffs.items() if v != 0}
        print(f"with_out={with_out} fast={fast}: out equal {torch.equal(o, r[0])}, last equal "
              f"{torch.equal(last, r[1])}, grads differing: {bad or 'none'}", flush=True)  # fmt: skip
        if "u" in bad:
            d = (gr["u"].float() - r[2]["u"].float()).abs()
            cols = (d > 1e-3 * r[2]["u"].float().abs().max()).any(dim=(0, 1)).nonzero().flatten()
            print(f"   du wrong at steps {cols.min().item()}..{cols.max().item()} "
                  f"({cols.numel()} steps)")  # fmt: skip
    for name, fn in (("forward", triton_fwd.forward), ("backward", triton_bwd.backward)):
        print(f"{name}: {len(fn.plans)} plans, rejected {fn.rejected}")
        for plan in fn.plans.values():
            if not isinstance(plan, launch_plan.Plan):
                continue
            print(
                f"  plan: {plan.n_launches} launches, {plan.n_ops} ops, arena {plan.arena_bytes} B"
            )
            for s in plan.steps:
                if s[0] == "launch":
                    print(f"    launch grid {s[2]} refs {s[5]}")
                elif s[0] == "empty":
                    print(f"    empty {s[1]} {s[3]} -> slot {s[5]}")
                elif s[0] == "op":
                    print(f"    op {s[1]} refs {s[3]} -> {s[7]}")
                else:
                    print(f"    call {s[1]._jit.fn.__name__}")


if __name__ == "__main__":
    main()
