"""Mamba-2's SSD scan in ONNX Runtime on CPU: the opset-27 ``LinearAttention`` node
(``ssmscan.export(..., onnx_linear_attention=True)``) against the ``Scan`` loop (the default ONNX
export, dynamic length) and, where asked, the chunked parallel realization (static length), with
eager ssmscan (the CPU kernel) as the anchor, side by side in one run. The model is one
``ssmscan.ssd_scan`` call with D, gate z, dt bias and softplus; inputs x, dt, B, C, z; fp32.

Correctness first: every variant's output is checked against the float64 sequential reference
(``ssd_scan_reference``) and a variant off by more than the fp32 tolerance is reported, not timed.
Times are medians of ``--reps`` runs after one warm-up, with ``--threads`` threads for both
PyTorch and ONNX Runtime.

    PYTHONPATH=src python benchmarks/export/bench_ssd_onnx.py
    PYTHONPATH=src python benchmarks/export/bench_ssd_onnx.py --shapes 1,2048,24,64,1,128 --parallel
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch
from torch.export import Dim

import ssmscan
from ssmscan.ops.ssd_scan.reference import ssd_scan_reference
from ssmscan.testing import rel_error, tolerance

# batch, L, nheads, headdim, ngroups, dstate
DEFAULT_SHAPES = ["1,2048,24,64,1,128", "1,2048,8,32,1,32"]


class SSD(torch.nn.Module):
    def __init__(self, nheads: int, headdim: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.A = torch.nn.Parameter(-torch.exp(torch.rand(nheads, generator=g) * 2.7))
        self.D = torch.nn.Parameter(torch.ones(nheads))
        dt = torch.exp(torch.rand(nheads, generator=g) * 4.6 - 6.9)  # [1e-3, 1e-1]
        self.dt_bias = torch.nn.Parameter(dt + torch.log(-torch.expm1(-dt)))

    def forward(self, x, dt, B, C, z):
        return ssmscan.ssd_scan(
            x, dt, self.A, B, C, D=self.D, z=z, dt_bias=self.dt_bias, dt_softplus=True
        )


def make_inputs(batch, L, nheads, headdim, ngroups, dstate):
    g = torch.Generator().manual_seed(L)
    return (
        torch.randn(batch, L, nheads, headdim, generator=g),
        torch.randn(batch, L, nheads, generator=g),
        torch.randn(batch, L, ngroups, dstate, generator=g),
        torch.randn(batch, L, ngroups, dstate, generator=g),
        torch.randn(batch, L, nheads, headdim, generator=g),
    )


def median_ms(fn, reps: int) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def ort_runner(path: str, threads: int, inputs):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs, strict=True)}
    return lambda: torch.from_numpy(sess.run(None, feeds)[0])


def bench_shape(shape: tuple[int, ...], reps: int, threads: int, parallel: bool) -> list[dict]:
    nheads, headdim = shape[2], shape[3]
    model = SSD(nheads, headdim).eval()
    x = make_inputs(*shape)
    with torch.no_grad():
        ref = ssd_scan_reference(
            *(t.double() for t in x[:2]), model.A.double(), *(t.double() for t in x[2:4]),
            D=model.D.double(), z=x[4].double(), dt_bias=model.dt_bias.double(),
            dt_softplus=True,
        )  # fmt: skip
    dyn = ({1: Dim("L", min=1, max=1 << 16)},) * 5
    variants: dict[str, object] = {"eager ssmscan (CPU kernel)": lambda: model(*x)}
    builds = [("onnx Scan loop", dict(dynamic_shapes=dyn))]
    builds.append(("onnx LinearAttention", dict(dynamic_shapes=dyn, onnx_linear_attention=True)))
    if parallel:
        builds.append(("onnx parallel (static L)", dict(realization="parallel")))
    rows = []
    tag = "B{}-L{}-H{}-P{}-G{}-N{}".format(*shape)
    for name, kw in builds:
        path = os.path.join(tempfile.mkdtemp(prefix="ssmscan-bench-"), "ssd.onnx")
        t0 = time.perf_counter()
        try:
            ssmscan.export(model, x, "onnx", path=path, dynamic_batch=False, **kw)
        except Exception as e:  # report and go on: one broken variant must not hide the rest
            rows.append(dict(shape=tag, variant=name, error=f"{type(e).__name__}: {e}"[:300]))
            print(json.dumps(rows[-1]), flush=True)
            continue
        build_s = time.perf_counter() - t0
        variants[f"{name} (built in {build_s:.0f} s, {os.path.getsize(path) // 1000} kB)"] = (
            ort_runner(path, threads, x)
        )
    tol = tolerance(torch.float32)
    base = None
    for name, fn in variants.items():
        with torch.no_grad():
            out = fn()  # type: ignore[operator]
        err = rel_error(out.double(), ref)
        row = dict(shape=tag, variant=name, rel_err_vs_fp64=float(f"{err:.2e}"))
        if err > tol:
            row["refused"] = f"error {err:.1e} > {tol:.0e}"
        else:
            with torch.no_grad():
                row["ms"] = round(median_ms(fn, reps), 2)  # type: ignore[arg-type]
            if "Scan loop" in name:
                base = row["ms"]
            if base is not None:
                row["scan_loop_ms / ms"] = round(base / row["ms"], 2)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES, help="B,L,H,P,G,N")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--parallel", action="store_true", help="also the static-L parallel export")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import onnxruntime

    print(
        f"# torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, "
        f"threads {args.threads}, cpus {os.cpu_count()}, {args}",
        flush=True,
    )
    rows = []
    for s in args.shapes:
        rows += bench_shape(
            tuple(int(v) for v in s.split(",")), args.reps, args.threads, args.parallel
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
