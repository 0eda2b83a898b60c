"""CPU benchmark of ssmscan.ssd_scan against the pure-PyTorch SSD anchors, side by side.

    python benchmarks/ssd_scan/bench_cpu.py [--shape 1,2048,24,64,128] [--reps 5]
    python benchmarks/ssd_scan/bench_cpu.py --sweep      # the chunk-size table of the planner

Figures in src/ssmscan/ops/ssd_scan/README.md were taken with ``taskset -c 0,1`` and
OMP_NUM_THREADS=2 on an idle host; on a machine shared with other jobs use ``--threads 1``
(OpenMP barriers stall when a core is taken away mid-op, which punishes many small ops).

Shape is (batch, L, nheads, headdim, dstate), ngroups 1, fp32, in Mamba-2's configuration:
dt_bias with softplus, D per head, A = -exp(0.5 * randn), dt in [1e-3, 0.1]. Variants:

* ``ssmscan``: ``ssmscan.ssd_scan`` (the planner's chunk size).
* ``transformers``: transformers' own pure-PyTorch SSD, ``mamba2_chunk_scan`` from
  ``models/mamba2/modeling_mamba2.py`` (what ``Mamba2Mixer`` runs on CPU), imported and called
  as the mixer calls it, at Mamba2Config's default chunk 256 and at 64.
* ``ssd_minimal``: mamba-ssm's ``ssd_minimal_discrete`` (mamba_ssm/modules/ssd_minimal.py,
  Listing 1 of the Mamba-2 paper), copied below with its einops rearranges written as torch
  reshapes, at block 64 (its fastest here) and 256; it needs L divisible by the block.

Correctness first: every variant's output and final state are checked against the float64
sequential reference, and, for the forward+backward timing, its gradients against autograd of
the float64 chunked reference (itself equal to the sequential one to 1e-15); a variant that fails
its check is not timed. Times are medians of ``--reps`` runs after one warm-up.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

import ssmscan
from ssmscan.ops.ssd_scan.common import plan_chunk_size
from ssmscan.ops.ssd_scan.reference import ssd_scan_chunked_reference, ssd_scan_reference
from ssmscan.testing import rel_error, tolerance


# --- mamba-ssm's ssd_minimal_discrete, einops written out --------------------------------------
def _segsum(x: torch.Tensor) -> torch.Tensor:
    T = x.size(-1)
    x = x[..., None].expand(*x.shape, T)
    mask = torch.tril(torch.ones(T, T, device=x.device, dtype=bool), diagonal=-1)
    x = x.masked_fill(~mask, 0)
    x_segsum = torch.cumsum(x, dim=-2)
    mask = torch.tril(torch.ones(T, T, device=x.device, dtype=bool), diagonal=0)
    return x_segsum.masked_fill(~mask, -torch.inf)


def ssd_minimal_discrete(X, A, B, C, block_len, initial_states=None):
    """X (b, L, h, p), A (b, L, h), B, C (b, L, h, n) -> (Y, final_state)."""
    b, L = X.shape[:2]
    X, A, B, C = [t.reshape(b, L // block_len, block_len, *t.shape[2:]) for t in (X, A, B, C)]
    A = A.permute(0, 3, 1, 2)  # b h c l
    A_cumsum = torch.cumsum(A, dim=-1)
    Lm = torch.exp(_segsum(A))
    Y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", C, B, Lm, X)
    decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, decay_states, X)
    if initial_states is None:
        initial_states = torch.zeros_like(states[:, :1])
    states = torch.cat([initial_states, states], dim=1)
    decay_chunk = torch.exp(_segsum(F.pad(A_cumsum[:, :, :, -1], (1, 0))))
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final_state = new_states[:, :-1], new_states[:, -1]
    state_decay_out = torch.exp(A_cumsum)
    Y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", C, states, state_decay_out)
    Y = (Y_diag + Y_off).reshape(b, L, *Y_diag.shape[3:])
    return Y, final_state


def minimal_variant(block):
    def run(x, dt, A, B, C, D, dt_bias):
        d = F.softplus(dt + dt_bias)  # the preprocessing a caller of ssd_minimal does
        nheads = x.shape[2]
        Bh = B.repeat_interleave(nheads // B.shape[2], dim=2)
        Ch = C.repeat_interleave(nheads // C.shape[2], dim=2)
        y, final = ssd_minimal_discrete(x * d[..., None], A * d, Bh, Ch, block)
        return y + D[:, None] * x, final

    return run


def transformers_variant(chunk):
    from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan

    def run(x, dt, A, B, C, D, dt_bias):
        return mamba2_chunk_scan(
            x, dt, A, B, C, chunk_size=chunk, D=D, dt_bias=dt_bias, dt_softplus=True,
            return_final_states=True,
        )  # fmt: skip

    return run


def ours(chunk=None):
    def run(x, dt, A, B, C, D, dt_bias):
        return ssmscan.ssd_scan(
            x, dt, A, B, C, chunk_size=chunk, D=D, dt_bias=dt_bias, dt_softplus=True,
            return_final_states=True,
        )  # fmt: skip

    return run


def make_inputs(shape, dtype=torch.float32, seed=0):
    batch, L, nheads, headdim, dstate = shape
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    lo, hi = math.log(1e-3), math.log(1e-1)
    dt_target = torch.exp(torch.rand(batch, L, nheads, generator=g, dtype=f64) * (hi - lo) + lo)
    bias = torch.exp(torch.rand(nheads, generator=g, dtype=f64) * (hi - lo) + lo)

    def inv_softplus(y):
        return y + torch.log(-torch.expm1(-y))

    kw = {
        "x": torch.randn(batch, L, nheads, headdim, generator=g, dtype=f64),
        "dt": inv_softplus(dt_target) - inv_softplus(bias),
        "A": -torch.exp(0.5 * torch.randn(nheads, generator=g, dtype=f64)),
        "B": torch.randn(batch, L, 1, dstate, generator=g, dtype=f64),
        "C": torch.randn(batch, L, 1, dstate, generator=g, dtype=f64),
        "D": torch.randn(nheads, generator=g, dtype=f64),
        "dt_bias": inv_softplus(bias),
    }
    return {k: v.to(dtype) for k, v in kw.items()}


def _median_time(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _leaves(kw):
    return {k: v.detach().clone().requires_grad_() for k, v in kw.items()}


def reference_results(kw32, with_grads):
    """Float64 out / final state (sequential reference) and, optionally, gradients of
    sum(out * gy) + sum(final * gf) (autograd of the float64 chunked reference)."""
    k64 = {k: v.to(torch.float64) for k, v in kw32.items()}
    out, final = ssd_scan_reference(**k64, dt_softplus=True, return_final_states=True)
    g = torch.Generator().manual_seed(1)
    gy = torch.randn(out.shape, generator=g, dtype=torch.float64)
    gf = torch.randn(final.shape, generator=g, dtype=torch.float64)
    grads = None
    if with_grads:
        leaves = _leaves(k64)
        o, f = ssd_scan_chunked_reference(**leaves, chunk_size=64, dt_softplus=True)
        torch.autograd.backward([o, f], [gy, gf])
        grads = {k: v.grad for k, v in leaves.items()}
    return out, final, gy, gf, grads


def check(name, fn, kw32, ref, with_grads):
    out_ref, final_ref, gy, gf, grads_ref = ref
    tol = tolerance(torch.float32)
    leaves = _leaves(kw32)
    out, final = fn(**leaves)
    errs = {"out": rel_error(out, out_ref), "final": rel_error(final, final_ref)}
    if with_grads:
        torch.autograd.backward([out, final], [gy.float(), gf.float()])
        errs.update({f"d{k}": rel_error(v.grad, grads_ref[k]) for k, v in leaves.items()})
    worst = max(errs, key=errs.get)
    ok = errs[worst] <= tol
    print(f"  check {name:18s} worst {worst} {errs[worst]:.1e} ({'ok' if ok else 'FAILED'})")
    return ok


def _interleaved_medians(steps, reps):
    """Median seconds of each step; the steps are run round-robin (one warm-up round first), so
    a change of machine load during the run falls on every variant alike."""
    times = {name: [] for name in steps}
    for rep in range(reps + 1):
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            if rep:
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def bench(shape, reps, variants):
    kw = make_inputs(shape)
    print(f"shape (batch, L, nheads, headdim, dstate) = {shape}, fp32, torch {torch.__version__},"
          f" {torch.get_num_threads()} threads")  # fmt: skip
    for mode in ("fwd", "fwd+bwd"):
        with_grads = mode == "fwd+bwd"
        ref = reference_results(kw, with_grads)
        steps = {}
        for name, fn in variants.items():
            if not check(name, fn, kw, ref, with_grads):
                continue
            if with_grads:
                gy, gf = ref[2].float(), ref[3].float()

                def step(fn=fn, gy=gy, gf=gf):
                    leaves = _leaves(kw)
                    o, f = fn(**leaves)
                    torch.autograd.backward([o, f], [gy, gf])

            else:

                def step(fn=fn):
                    with torch.no_grad():
                        fn(**kw)

            steps[name] = step
        medians = _interleaved_medians(steps, reps)
        base = medians.get("ssmscan")
        for name, t in medians.items():
            ratio = f"{t / base:6.2f}x ssmscan" if base else ""
            print(f"  {mode:8s} {name:18s} {t * 1e3:9.1f} ms  {ratio}")


def sweep(reps):
    """Chunk size against time, forward and forward+backward, over a few head shapes."""
    shapes = [(1, 2048, 24, 64, 128), (1, 2048, 24, 64, 64), (1, 2048, 24, 64, 16),
              (1, 2048, 16, 128, 128), (1, 2048, 48, 32, 32), (2, 1024, 8, 64, 256)]  # fmt: skip
    for shape in shapes:
        kw = make_inputs(shape)
        steps = {}
        for Q in (32, 64, 128, 256):
            fn = ours(Q)

            def fwd(fn=fn, kw=kw):
                with torch.no_grad():
                    fn(**kw)

            def fwd_bwd(fn=fn, kw=kw):
                leaves = _leaves(kw)
                o, f = fn(**leaves)
                (o.sum() + f.sum()).backward()

            steps[f"{Q} fwd"], steps[f"{Q} fwd+bwd"] = fwd, fwd_bwd
        med = _interleaved_medians(steps, reps)
        cells = [
            f"Q={Q}: {med[f'{Q} fwd'] * 1e3:6.1f}/{med[f'{Q} fwd+bwd'] * 1e3:6.1f}"
            for Q in (32, 64, 128, 256)
        ]
        plan = plan_chunk_size(shape[2], shape[3], shape[4], 1)
        print(f"{shape} planner {plan}  fwd/fwd+bwd ms  " + "  ".join(cells))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="1,2048,24,64,128")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.sweep:
        sweep(args.reps)
        return
    shape = tuple(int(s) for s in args.shape.split(","))
    variants = {
        "ssmscan": ours(),
        "transformers-256": transformers_variant(256),
        "transformers-64": transformers_variant(64),
        "ssd_minimal-64": minimal_variant(64),
        "ssd_minimal-256": minimal_variant(256),
    }
    if shape[1] % 256:
        variants = {k: v for k, v in variants.items() if not k.startswith("ssd_minimal")}
    bench(shape, args.reps, variants)


if __name__ == "__main__":
    main()
