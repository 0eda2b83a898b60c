"""Context-parallel selective scan: equality, time per step, bytes exchanged, longest L.

The 2-GPU measurement (one sequence sharded over the ranks, NCCL):

    torchrun --nproc_per_node 2 benchmarks/distributed/bench_cp.py \\
        --batch 4 --dim 2048 --length 131072 --N 16 --dtype bf16 --max-length

CPU smoke test (spawns 2 gloo processes at a tiny size):

    python benchmarks/distributed/bench_cp.py --smoke

What it does, on every rank:

1. Equality (before any timing; a failing check stops the run): every rank builds the whole
   sequence's inputs from one seed on its own device, runs ``ssmscan.selective_scan`` over the whole
   sequence (forward + backward with a fixed random output gradient) and
   ``ssmscan.distributed.selective_scan`` on its shard (equal shards), and compares outputs, the last
   state and every gradient (parameter gradients summed over ranks) with ``rel_error`` against
   ``ssmscan.testing.tolerance(dtype)``.
2. Time per step (forward + backward, and forward alone): the sharded scan on all ranks (the
   slowest rank's time) against one device running the whole sequence (rank 0, others waiting).
   A fixed number of repetitions between CUDA events rather than ``triton.testing.do_bench``:
   do_bench picks its repetition count per process, and ranks that disagree on it would
   deadlock in the collectives.
3. Bytes exchanged per step and rank, counted at the ``torch.distributed`` calls the op makes
   (payload of every all-gather / reduce-scatter / all-reduce: metadata check, forward maps,
   backward adjoint).
4. ``--max-length`` (CUDA only): the longest L whose forward + backward fits, on one device (a
   doubling-then-bisection search, catching out-of-memory) and sharded over the ranks (the peak
   memory per rank is measured at two lengths and extrapolated linearly to the device's memory,
   then the predicted length is run once to confirm; an out-of-memory error on one rank cannot
   be caught without desynchronizing the collectives, so the sharded side is not searched).

Prints one markdown table for ``benchmarks/RESULTS.md`` on rank 0 (and ``--json`` writes it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

import ssmscan
import ssmscan.distributed as sd
from ssmscan.testing import rel_error, tolerance

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TIME_ARGS = ("u", "delta", "z", "B", "C")
PARAMS = ("A", "D", "delta_bias")

# --- inputs ----------------------------------------------------------------------------------


def make_inputs(
    batch: int, dim: int, L: int, N: int, dtype: torch.dtype, device: torch.device, seed: int = 0
) -> dict[str, Any]:
    """Mamba-like inputs (as ``ssmscan.testing.make_selective_scan_inputs``), drawn on ``device``
    in chunks of time, so that neither host memory nor float32 temporaries bound the length."""
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32)

    def log_uniform(*shape: int) -> torch.Tensor:
        r = torch.rand(*shape, generator=g, device=device, dtype=torch.float32)
        return torch.exp(r * (math.log(1e-1) - math.log(1e-3)) + math.log(1e-3))

    def inv_softplus(y: torch.Tensor) -> torch.Tensor:
        return y + torch.log(-torch.expm1(-y))

    def chunked(fn: Callable[[int], torch.Tensor], rows: int) -> torch.Tensor:
        out = torch.empty(batch, rows, L, dtype=dtype, device=device)
        step = max(1, L // 16)
        for t in range(0, L, step):
            n = min(step, L - t)
            out[..., t : t + n] = fn(n)
        return out

    bias = inv_softplus(log_uniform(dim))
    return {
        "u": chunked(lambda n: randn(batch, dim, n), dim),
        "delta": chunked(lambda n: inv_softplus(log_uniform(batch, dim, n)) - bias[:, None], dim),
        "A": -torch.exp(0.5 * randn(dim, N)),
        "B": chunked(lambda n: randn(batch, N, n), N),
        "C": chunked(lambda n: randn(batch, N, n), N),
        "D": randn(dim),
        "z": chunked(lambda n: randn(batch, dim, n), dim),
        "delta_bias": bias,
        "delta_softplus": True,
    }


def shard(kw: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    return {k: (v[..., lo:hi].contiguous() if k in TIME_ARGS else v) for k, v in kw.items()}


def leaves(kw: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (v.detach().clone().requires_grad_() if isinstance(v, torch.Tensor) else v)
        for k, v in kw.items()
    }


# --- helpers ---------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], None], reps: int, device: torch.device) -> float:
    """Median-free fixed-rep mean in ms (see the module docstring for why not do_bench)."""
    for _ in range(2):
        fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / reps * 1e3


def all_max(x: float, device: torch.device) -> float:
    t = torch.tensor([x], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


class CommCounter:
    """Counts the payload bytes of the collectives ``ssmscan.distributed`` makes."""

    NAMES = ("all_gather_into_tensor", "all_gather", "reduce_scatter_tensor", "all_reduce")

    def __init__(self) -> None:
        self.bytes: dict[str, int] = defaultdict(int)
        self.phase = "other"
        self._orig: dict[str, Callable[..., Any]] = {}

    def __enter__(self) -> CommCounter:
        for name in self.NAMES:
            orig = getattr(dist, name)
            self._orig[name] = orig

            def wrapped(*args: Any, _orig: Callable[..., Any] = orig, **kw: Any) -> Any:
                out = args[0]
                tensors = out if isinstance(out, list) else [out]
                self.bytes[self.phase] += sum(t.numel() * t.element_size() for t in tensors)
                return _orig(*args, **kw)

            setattr(dist, name, wrapped)
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, orig in self._orig.items():
            setattr(dist, name, orig)


def step(kw: dict[str, Any], gout: torch.Tensor, distributed: bool) -> None:
    fn = sd.selective_scan if distributed else ssmscan.selective_scan
    out = fn(**kw)
    torch.autograd.backward(out, gout)


# --- the four measurements -------------------------------------------------------------------


def check_equality(
    args: argparse.Namespace, rank: int, world: int, device: torch.device
) -> dict[str, float]:
    dtype = DTYPES[args.dtype]
    L = args.length
    full = make_inputs(args.batch, args.dim, L, args.N, dtype, device)
    g = torch.Generator(device=device).manual_seed(1)
    gout = torch.randn(args.batch, args.dim, L, generator=g, device=device).to(dtype)
    glast = torch.randn(args.batch, args.dim, args.N, generator=g, device=device)
    ref = leaves(full)
    out, last = ssmscan.selective_scan(**ref, return_last_state=True)
    torch.autograd.backward([out, last], [gout, glast])
    lo, hi = rank * L // world, (rank + 1) * L // world
    mine = leaves(shard(full, lo, hi))
    d_out, d_last = sd.selective_scan(**mine, return_last_state=True)
    grads = [gout[..., lo:hi], glast if rank == world - 1 else torch.zeros_like(glast)]
    torch.autograd.backward([d_out, d_last], grads)
    errors = {"out": rel_error(d_out, out[..., lo:hi])}
    if rank == world - 1:
        errors["last_state"] = rel_error(d_last, last)
    for k, v in mine.items():
        if not isinstance(v, torch.Tensor):
            continue
        grad, want = v.grad, ref[k].grad
        if k in PARAMS:
            dist.all_reduce(grad)
        else:
            want = want[..., lo:hi]
        errors[f"d{k}"] = rel_error(grad, want)
    worst = torch.tensor([max(errors.values())], dtype=torch.float64, device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    errors["worst_over_ranks"] = float(worst.item())
    del full, ref, mine, out, last, d_out, d_last, gout
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return errors


def _time_sharded(
    args: argparse.Namespace, rank: int, world: int, device: torch.device
) -> dict[str, float]:
    dtype = DTYPES[args.dtype]
    L = args.length
    lo, hi = rank * L // world, (rank + 1) * L // world
    mine = leaves(shard(make_inputs(args.batch, args.dim, L, args.N, dtype, device), lo, hi))
    gout = torch.randn(args.batch, args.dim, hi - lo, device=device).to(dtype)
    res = {"cp_fwd_bwd_ms": timed(lambda: step(mine, gout, True), args.reps, device)}
    with torch.no_grad():
        res["cp_fwd_ms"] = timed(lambda: sd.selective_scan(**mine), args.reps, device)
    res = {k: all_max(v, device) for k, v in res.items()}
    with CommCounter() as counter:
        counter.phase = "forward"
        out = sd.selective_scan(**mine)
        counter.phase = "backward"
        torch.autograd.backward(out, gout)
    res["bytes_per_step_rank"] = float(sum(counter.bytes.values()))
    res["bytes_forward"] = float(counter.bytes["forward"])
    res["bytes_backward"] = float(counter.bytes["backward"])
    return res


def _time_one_device(args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    dtype = DTYPES[args.dtype]
    full = leaves(make_inputs(args.batch, args.dim, args.length, args.N, dtype, device))
    gfull = torch.randn(args.batch, args.dim, args.length, device=device).to(dtype)
    res = {"one_fwd_bwd_ms": timed(lambda: step(full, gfull, False), args.reps, device)}
    with torch.no_grad():
        res["one_fwd_ms"] = timed(lambda: ssmscan.selective_scan(**full), args.reps, device)
    return res


def measure_time(
    args: argparse.Namespace, rank: int, world: int, device: torch.device
) -> dict[str, float]:
    res = _time_sharded(args, rank, world, device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    dist.barrier()
    if rank == 0:  # one device, the whole sequence (the other ranks wait)
        res.update(_time_one_device(args, device))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    dist.barrier()
    return res


def peak_bytes(fn: Callable[[], None], device: torch.device) -> int:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    sync(device)
    return int(torch.cuda.max_memory_allocated(device))


def fits_one(args: argparse.Namespace, L: int, device: torch.device) -> bool:
    dtype = DTYPES[args.dtype]
    try:
        kw = leaves(make_inputs(args.batch, args.dim, L, args.N, dtype, device))
        step(kw, torch.ones(args.batch, args.dim, L, device=device, dtype=dtype), False)
        sync(device)
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        kw = None
        torch.cuda.empty_cache()


def longest_lengths(
    args: argparse.Namespace, rank: int, world: int, device: torch.device
) -> dict[str, float]:
    dtype = DTYPES[args.dtype]
    quantum = 4096
    res: dict[str, float] = {}
    if rank == 0:  # one device: doubling, then bisection on multiples of `quantum`
        lo, hi = 0, quantum
        while fits_one(args, hi, device):
            lo, hi = hi, hi * 2
        while hi - lo > quantum:
            mid = (lo + hi) // 2 // quantum * quantum
            lo, hi = (mid, hi) if fits_one(args, mid, device) else (lo, mid)
        res["longest_L_one_device"] = lo
    dist.barrier()

    def cp_peak(L: int) -> int:
        kw = leaves(
            shard(make_inputs(args.batch, args.dim, L, args.N, dtype, device), 0, L // world)
        )
        gout = torch.ones(args.batch, args.dim, L // world, device=device, dtype=dtype)
        peak = peak_bytes(lambda: step(kw, gout, True), device)
        return int(all_max(float(peak), device))

    L1, L2 = 8 * quantum * world, 16 * quantum * world
    p1, p2 = cp_peak(L1), cp_peak(L2)
    total = torch.cuda.get_device_properties(device).total_memory
    per_step = (p2 - p1) / (L2 - L1)
    predicted = int((0.97 * total - (p1 - per_step * L1)) / per_step) // (quantum * world)
    predicted *= quantum * world
    res["predicted_longest_L_sharded"] = predicted
    res["confirmed_peak_GiB_per_rank"] = cp_peak(predicted) / 2**30
    return res


# --- driver ----------------------------------------------------------------------------------


def run(args: argparse.Namespace, rank: int, world: int, device: torch.device) -> None:
    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "backend": dist.get_backend(),
        "world": world,
        "shape": [args.batch, args.dim, args.length, args.N],
        "dtype": args.dtype,
    }
    errors = check_equality(args, rank, world, device)
    tol = tolerance(DTYPES[args.dtype])
    result["errors_rank0"] = errors
    result["tolerance"] = tol
    if not errors["worst_over_ranks"] <= tol:
        raise AssertionError(f"rank {rank}: sharded scan differs from one device: {errors}")
    result.update(measure_time(args, rank, world, device))
    if args.max_length:
        if device.type != "cuda":
            raise ValueError("--max-length needs CUDA devices")
        result.update(longest_lengths(args, rank, world, device))
    if rank == 0:
        report(result)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=2)


def report(r: dict[str, Any]) -> None:
    b, d, L, N = r["shape"]
    print(f"# context-parallel selective scan, {r['date']}, {r['device']} x{r['world']} ({r['backend']}), torch {r['torch']}")  # fmt: skip
    print(f"shape (batch, dim, L, N) = ({b}, {d}, {L}, {N}) {r['dtype']}; shards of L/{r['world']}")  # fmt: skip
    print()
    print("| measure | value |")
    print("|---|---|")
    print(f"| worst rel. error over ranks (out, last state, every grad) | {r['errors_rank0']['worst_over_ranks']:.2e} (tol {r['tolerance']:.0e}) |")  # fmt: skip
    print(f"| fwd+bwd ms: sharded over {r['world']} / one device whole L | {r['cp_fwd_bwd_ms']:.2f} / {r['one_fwd_bwd_ms']:.2f} ({r['one_fwd_bwd_ms'] / r['cp_fwd_bwd_ms']:.2f}x) |")  # fmt: skip
    print(f"| fwd ms: sharded / one device | {r['cp_fwd_ms']:.2f} / {r['one_fwd_ms']:.2f} ({r['one_fwd_ms'] / r['cp_fwd_ms']:.2f}x) |")  # fmt: skip
    print(f"| bytes exchanged per step and rank (fwd / bwd / total incl. metadata) | {r['bytes_forward']:.0f} / {r['bytes_backward']:.0f} / {r['bytes_per_step_rank']:.0f} |")  # fmt: skip
    if "longest_L_one_device" in r:
        print(f"| longest L, one device (searched) | {r['longest_L_one_device']} |")
        print(f"| longest L, sharded over {r['world']} (extrapolated, confirmed at {r['confirmed_peak_GiB_per_rank']:.1f} GiB/rank) | {r['predicted_longest_L_sharded']} |")  # fmt: skip


def worker(rank: int, world: int, args: argparse.Namespace, store_path: str | None) -> None:
    use_cuda = torch.cuda.is_available() and not args.smoke
    backend = "nccl" if use_cuda else "gloo"
    timeout = datetime.timedelta(seconds=600)
    if store_path is None:
        dist.init_process_group(backend, timeout=timeout)
    else:
        store = dist.FileStore(store_path, world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    if use_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    try:
        run(args, dist.get_rank(), dist.get_world_size(), device)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--length", type=int, default=2 * 65536, help="the whole sequence")
    parser.add_argument("--N", type=int, default=16)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--max-length", action="store_true", help="search the longest L (CUDA)")
    parser.add_argument("--json", help="also write the results here (rank 0)")
    parser.add_argument("--smoke", action="store_true", help="2 gloo processes on CPU, tiny size")
    args = parser.parse_args()
    if args.smoke:
        args.batch, args.dim, args.length, args.N, args.dtype, args.reps = 2, 16, 512, 4, "fp32", 3
    if "RANK" in os.environ:  # torchrun
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, None)
        return
    with tempfile.TemporaryDirectory() as tmp:
        torch.multiprocessing.spawn(worker, args=(2, args, os.path.join(tmp, "store")), nprocs=2)


if __name__ == "__main__":
    main()
