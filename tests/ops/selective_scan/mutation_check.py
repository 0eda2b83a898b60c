"""What torch's mutation analysis makes of every kernel a selective-scan training step launches
(Note [traced kernels' inline asm] in ``triton_bwd_lane``), without a GPU.

Under ``torch.compile`` / export each launch is a ``wrap_triton`` node, and torch reads the
kernel's TTIR to find the arguments it writes; where that analysis fails it takes every argument
as written, and AOT autograd then copies the "results" back into the inputs (a compile error
when an input is a leaf that requires grad). This script runs in two steps:

* ``capture OUT.pkl`` (under ``TRITON_INTERPRET=1``): the forward and backward launchers on small
  CPU tensors, each launch recorded (not run) with the arguments a traced launch would pass
  (``_Launcher.traced_args``) by plans made for an H200 (``plan.H200``) as traced launches
  (no ``PREFETCH_BC``); every tensor argument is marked with the op
  input it is (u, delta, ..., dout, checkpoints), if any;
* ``analyze OUT.pkl`` (without the interpreter: the plans' inline PTX compiles): for each recorded
  launch, torch's own analysis on the sm_90 TTIR; prints one line per launch, "ok" when the
  analysis succeeded and no op input is among the written arguments.

Exit status 1 if any launch is not ok. Configurations: ``CASES`` (every kernel variant of the
selective scan), then linear_scan's and selective_state_update's kernels."""

from __future__ import annotations

import importlib
import inspect
import pickle
import sys
from typing import Any

import torch

# (label, (policy, the plans' fallbacks), (batch, dim, L, N, groups, dtype)): every kernel the
# planner can choose on a GPU. L = 300 (not a multiple of 16): the tile backward with its
# reduce-scatter (tile_rs), as in ``test_compile_reduce_overhead_training_step_gpu``; L = 512: the
# split path; batch 1 and few channels: L in segments; 12 channels a group: the plain tile one.
CASES = [
    ("lane fwd, tile_rs bwd", (None, False), (1, 16, 300, 16, None, torch.float32)),
    ("lane fwd, lane bwd, states with the local pass", (None, False),
     (1, 16, 512, 16, None, torch.bfloat16)),
    ("one segment", ("one-segment", False), (2, 16, 512, 16, None, torch.float32)),
    ("2-D fwd, split bwd", (None, True), (1, 16, 512, 16, None, torch.float32)),
    ("tile bwd, 12 channels a group", (None, False), (1, 24, 300, 4, 2, torch.float32)),
]  # fmt: skip
OP_INPUTS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "dout", "checkpoints")


def capture(path: str) -> None:
    import os

    # the test suite's interpreter shim (NumPy >= 2.4)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    import conftest  # noqa: F401
    from ssmscan.ops.common import triton_launch
    from ssmscan.ops.linear_scan import triton_fwd as linear_fwd
    from ssmscan.ops.selective_scan import triton_bwd, triton_fwd
    from ssmscan.ops.selective_scan.plan import H200, Policy
    from ssmscan.ops.selective_scan.shapes import empty_backward_outputs, empty_forward_outputs
    from ssmscan.ops.selective_state_update import triton_fwd as update_fwd
    from ssmscan.testing import make_selective_scan_inputs

    records: list[dict[str, Any]] = []
    inputs: dict[int, str] = {}

    def spy(self, grid, *args, **kwargs):
        like = triton_launch._first_tensor(args, kwargs)
        a, kw = self.traced_args(args, kwargs, like)
        fn = self._jit.fn
        params = inspect.signature(fn).parameters
        options = {k: v for k, v in kw.items() if k not in params}  # num_warps, maxnreg
        bound = (
            inspect.signature(fn)
            .bind_partial(*a, **{k: v for k, v in kw.items() if k in params})
            .arguments
        )
        bound.update(options)  # (torch's analysis drops them as Triton's launch does)
        described = {}
        for name, v in bound.items():
            if isinstance(v, torch.Tensor):
                ptr = v.untyped_storage().data_ptr()
                described[name] = ("tensor", str(v.dtype), v.numel(), inputs.get(ptr))
            else:
                described[name] = ("value", v)
        records.append(dict(module=fn.__module__, name=fn.__name__, args=described))
        # not run: only the launch sequence matters, and the host code never reads a result

    def mark(**named: torch.Tensor | None) -> None:
        inputs.clear()
        for name, t in named.items():
            if t is not None:
                inputs[t.untyped_storage().data_ptr()] = name

    triton_launch._Launcher._launch = spy  # type: ignore[method-assign]
    from torch._library.triton import set_wrap_triton_enabled  # (after the shim)

    for label, (policy, fallback), (batch, dim, L, N, groups, dtype) in CASES:
        pol = Policy(split_below_warps=0) if policy == "one-segment" else Policy()
        kw = make_selective_scan_inputs(batch, dim, L, N, groups=groups, dtype=dtype, device="cpu")
        u, delta, A, B, C, D, z, bias = (kw[k] for k in OP_INPUTS[:8])
        dout = torch.randn_like(u)
        outs = empty_forward_outputs(u, A)
        fplan = triton_fwd.plan_for(u, A, B, C, pol, H200)
        with set_wrap_triton_enabled(True):  # a traced launch's plan (the L1 prefetches off)
            bplan = triton_bwd.plan_for(u, A, B, (u,), pol, H200)
        if fallback:
            fplan, bplan = fplan.fallback, bplan.fallback
        mark(**dict(zip(OP_INPUTS, (u, delta, A, B, C, D, z, bias, dout))))
        records.append(dict(case=label))
        triton_fwd.launch(u, delta, A, B, C, D, z, bias, None, True, *outs, plan=fplan)
        inputs[outs[2].untyped_storage().data_ptr()] = "checkpoints"
        grads = empty_backward_outputs(u, delta, A, B, C, D, z, bias, None)
        triton_bwd.launch(
            dout, None, u, delta, A, B, C, D, z, bias, None, outs[2], True, *grads[:5], grads[5],
            plan=bplan,
        )  # fmt: skip
    # linear_scan (its backward is the same kernel, reversed) and selective_state_update
    records.append(dict(case="linear_scan"))
    a, b, init = torch.rand(37, 8), torch.randn(37, 8), torch.randn(8)
    mark(a=a, b=b, initial=init)
    linear_fwd.launch(a, b, init, torch.empty_like(b), False)
    records.append(dict(case="selective_state_update"))
    state, x, dt = torch.randn(2, 16, 16), torch.randn(2, 16), torch.rand(2, 16)
    A, B, C = -torch.rand(16, 16), torch.randn(2, 16), torch.randn(2, 16)
    D, z, dt_bias = torch.randn(16), torch.randn(2, 16), torch.randn(16)
    mark(state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias)
    update_fwd.launch(
        state, x, dt, A, B, C, D, z, dt_bias, True, torch.empty_like(x), torch.empty_like(state)
    )
    with open(path, "wb") as f:
        pickle.dump(records, f)


def written(kernel: Any, kwargs: dict[str, Any]) -> list[str]:
    """The tensor arguments torch's analysis of a traced launch takes as written."""
    import torch._higher_order_ops.triton_kernel_wrap as tkw

    if hasattr(tkw, "identify_accessed_tensors"):  # torch >= 2.13
        acc = tkw.identify_accessed_tensors(kernel, dict(kwargs), {})
        names = [d.name for d in acc.read_writes.writes]
    else:  # torch 2.11 / 2.12
        names = list(tkw.identify_mutated_tensors(kernel, dict(kwargs), {}))
    return [n for n in names if isinstance(kwargs.get(n), torch.Tensor)]


def analyze(path: str) -> int:
    import triton
    from triton.backends.compiler import GPUTarget

    class Driver:  # the analysis compiles for the current GPU's target: an H100 / H200's here
        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", 90, 32)

    triton.runtime.driver.set_active(Driver())
    # (where the analysis fails torch logs a warning with the exception, and takes every
    # argument as written: so then the op inputs are among them)

    with open(path, "rb") as f:
        records = pickle.load(f)
    bad = 0
    case = None
    control = None
    for rec in records:
        if "case" in rec:
            case = rec["case"]
            continue
        kernel = getattr(importlib.import_module(rec["module"]), rec["name"])
        kwargs: dict[str, Any] = {}
        for name, d in rec["args"].items():
            if d[0] == "tensor":
                kwargs[name] = torch.empty(max(d[2], 16), dtype=getattr(torch, d[1].split(".")[1]))
            else:
                kwargs[name] = d[1]
        if "EMU" in kwargs:
            kwargs["EMU"] = False  # the GPU's shuffles, not the interpreter's emulation
        w = written(kernel, kwargs)
        hit = [n for n in w if rec["args"][n][3] is not None]
        status = "FAILED" if hit else "ok"
        bad += bool(hit)
        print(f"{case}: {rec['name']} writes {sorted(w)}; op inputs among them {hit} {status}")
        if rec["name"] == "_selective_scan_bwd_lane_kernel" and control is None:
            control = (kernel, {**kwargs, "PREFETCH_BC": True}, rec)
    # negative control: the eager launch's L1 prefetch (a non-pure inline asm) defeats the
    # analysis, which then takes every argument as written
    assert control is not None, "no lane backward launch recorded"
    kernel, kwargs, rec = control
    hit = [n for n in written(kernel, kwargs) if rec["args"][n][3] is not None]
    print(f"control (lane backward with its eager prefetch): op inputs written {hit}", end=" ")
    print("ok" if hit else "FAILED (the check cannot fail)")
    bad += not hit
    return 1 if bad else 0


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "capture":
        capture(out)
    else:
        sys.exit(analyze(out))
