"""Affine scan h_t = a_t h_{t-1} + b_t along L: three parallel algorithms vs the sequential loop.

CPU:  python benchmarks/scan/bench_parallel_scan.py --device cpu --shape 4 256 1024 --onnx
GPU:  python benchmarks/scan/bench_parallel_scan.py --device cuda --shape 16 24576 1024 --compile
Correctness first: a variant whose output differs from the loop (float64 oracle on a slice) is not timed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ssmscan.scan import ALGORITHMS, affine_scan


def loop(a, b):
    h, out = torch.zeros_like(b[..., 0]), []
    for t in range(b.shape[-1]):
        h = a[..., t] * h + b[..., t]
        out.append(h)
    return torch.stack(out, -1)


def timeit(fn, device, reps):
    if device == "cuda":
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=100)  # median ms
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--shape", type=int, nargs=3, default=[4, 256, 1024], metavar=("B", "D", "L"))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--onnx", action="store_true", help="also time ONNX Runtime (CPU)")
    p.add_argument("--compile", action="store_true", help="also time torch.compile (inductor)")
    p.add_argument(
        "--flush-denormal",
        action="store_true",
        help="flush denormals to zero in PyTorch and ONNX Runtime (CPU): the running products of "
        "a in [0.9, 1] underflow at L = 1024, and denormal arithmetic is ~100x slower on x86",
    )
    args = p.parse_args()
    bsz, d, length = args.shape
    if args.flush_denormal:
        torch.set_flush_denormal(True)
    g = torch.Generator().manual_seed(0)
    a = (0.9 + 0.1 * torch.rand(bsz, d, length, generator=g)).to(args.device)
    b = torch.randn(bsz, d, length, generator=g).to(args.device)
    ref = loop(a[:1, :8].double(), b[:1, :8].double())
    fns = {"loop": lambda a, b: loop(a, b)}
    for algo in ALGORITHMS:
        fns[algo] = lambda a, b, algo=algo: affine_scan(a, b, -1, algorithm=algo)
    print(
        f"# device={args.device} shape={args.shape} torch={torch.__version__} "
        f"threads={torch.get_num_threads()} flush_denormal={args.flush_denormal}"
    )
    print("| variant | mode | ms | vs loop |")
    print("|---|---|---|---|")
    base = None
    for name, fn in fns.items():
        err = (fn(a[:1, :8], b[:1, :8]).double() - ref).abs().max().item()
        if err > 1e-3:
            print(f"| {name} | - | refused (err {err:.1e}) | |")
            continue
        modes = {"eager": fn}
        if args.compile and name != "loop":  # inductor would unroll L steps: minutes of compile
            modes["inductor"] = torch.compile(fn)
        for mode, f in modes.items():
            ms = timeit(lambda f=f: f(a, b), args.device, args.reps)
            base = base or ms
            print(f"| {name} | {mode} | {ms:.2f} | {base / ms:.2f}x |", flush=True)
        if args.onnx and name != "loop":
            ms = onnx_ms(fn, a, b, args.reps, args.flush_denormal)
            print(f"| {name} | onnxruntime | {ms:.2f} | {base / ms:.2f}x |", flush=True)


def onnx_ms(fn, a, b, reps, flush_denormal=False):
    import tempfile

    import onnxruntime as ort

    class M(torch.nn.Module):
        def forward(self, a, b):
            return fn(a, b)

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/m.onnx"
        torch.onnx.export(M(), (a.cpu(), b.cpu()), dynamo=True).save(path)
        opts = ort.SessionOptions()
        if flush_denormal:
            opts.add_session_config_entry("session.set_denormal_as_zero", "1")
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        feeds = {"a": a.cpu().numpy(), "b": b.cpu().numpy()}
        return timeit(lambda: sess.run(None, feeds), "cpu", reps)


if __name__ == "__main__":
    main()
