"""CPU ops in a multiprocessing child: ``python fork_worker.py METHOD OUT``.

The parent runs ``linear_scan`` and ``selective_scan`` (forward and backward) on two threads, so
the CPU kernels' thread pool exists, then starts a child with multiprocessing's METHOD start
method ("fork" or "spawn") that runs the same calls. ``OUT`` gets
``{op: {result: relative error against the float64 reference}}``, or ``{"hung": ...}`` when the
child does not finish in ``CHILD_TIMEOUT_S``.

torch's own OpenMP pool is not usable in a forked child either once the parent has run a parallel
region (a fork child's ``torch.exp`` hangs after the parent's, at any size, with two threads), and
no library can change that; so the inputs are drawn on one thread and the ops run at shapes
whose torch work stays on the calling thread: only ssmscan's pool runs on two threads. Not
collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from typing import Any

import torch

import ssmscan
from ssmscan.ops.linear_scan.reference import linear_scan_reference
from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.testing import make_linear_scan_inputs, make_selective_scan_inputs, rel_error

CHILD_TIMEOUT_S = 60
THREADS = 2  # the kernels split rows over torch.get_num_threads() pool threads


def make_inputs() -> dict[str, Any]:
    """Both ops' inputs and output gradients, drawn on one torch thread (see the module note)."""
    torch.set_num_threads(1)
    a, b = make_linear_scan_inputs((2, 600, 9), seed=7)  # 1200 rows: two pool ranges
    kw = make_selective_scan_inputs(
        2, 4, 33, 4, has_D=True, has_z=True, has_delta_bias=True, delta_softplus=True, seed=8
    )
    g = torch.Generator().manual_seed(9)
    grads = {"linear_scan": torch.randn(a.shape, generator=g)}
    grads["selective_scan"] = torch.randn(kw["u"].shape, generator=g)
    torch.set_num_threads(THREADS)
    return {"linear_scan": {"a": a, "b": b}, "selective_scan": kw, "grads": grads}


def run_ops(inputs: dict[str, Any], reference: bool) -> dict[str, dict[str, torch.Tensor]]:
    """Outputs and every input gradient of both ops (the fast CPU path, or float64 reference)."""
    results: dict[str, dict[str, torch.Tensor]] = {}
    lin = {k: v.detach().clone().requires_grad_() for k, v in inputs["linear_scan"].items()}
    if reference:
        h = linear_scan_reference(lin["a"], lin["b"], dim=-1, compute_dtype=torch.float64)
    else:
        h = ssmscan.linear_scan(lin["a"], lin["b"], dim=-1)
    ga, gb = torch.autograd.grad(h, [lin["a"], lin["b"]], inputs["grads"]["linear_scan"])
    results["linear_scan"] = {"h": h.detach(), "da": ga, "db": gb}

    kw = inputs["selective_scan"]
    leaves = {k: v.detach().clone().requires_grad_() for k, v in kw.items() if torch.is_tensor(v)}
    args = {**kw, **leaves}
    if reference:
        out = selective_scan_reference(**args, compute_dtype=torch.float64)
    else:
        out = ssmscan.selective_scan(**args)
    assert isinstance(out, torch.Tensor)
    grads = torch.autograd.grad(out, list(leaves.values()), inputs["grads"]["selective_scan"])
    results["selective_scan"] = {"out": out.detach()}
    results["selective_scan"].update({f"d{k}": gr for k, gr in zip(leaves, grads)})
    return results


def child(conn: Any) -> None:
    results = run_ops(make_inputs(), reference=False)
    # plain lists: torch's shared-memory pickling would need this process alive to hand them over
    conn.send({op: {k: t.tolist() for k, t in res.items()} for op, res in results.items()})
    conn.close()


def main() -> None:
    method, out_path = sys.argv[1], sys.argv[2]
    inputs = make_inputs()
    run_ops(inputs, reference=False)  # the parent's pool now exists (with fork, the child's copy)
    ctx = multiprocessing.get_context(method)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child, args=(send,))
    proc.start()
    send.close()
    report: dict[str, Any]
    if recv.poll(CHILD_TIMEOUT_S):
        got = recv.recv()
        proc.join(CHILD_TIMEOUT_S)
        ref = run_ops(inputs, reference=True)
        report = {
            op: {name: rel_error(torch.tensor(got[op][name]), r) for name, r in ref[op].items()}
            for op in ref
        }
        report["exitcode"] = proc.exitcode
    else:
        proc.kill()
        proc.join()
        report = {"hung": f"the {method} child returned nothing in {CHILD_TIMEOUT_S} s"}
    with open(out_path, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
