"""The selective-scan op benchmark behind ``ssmscan bench``: ssmscan against its anchors.

Every implementation is timed side by side in the same run, on the same inputs (a real Mamba
configuration: z, D, delta_bias, softplus; float32):

* ``ssmscan`` — ``ssmscan.selective_scan(impl="auto")``: the C kernel on CPU, Triton on CUDA.
* ``loop`` (CPU anchor) — the per-timestep PyTorch loop that mamba-ssm's ``selective_scan_ref``
  and transformers' slow path run (decays and inputs materialized as (batch, dim, L, N), one
  state update and one contraction per step).
* ``mamba-ssm`` (CUDA anchor) — mamba-ssm's ``selective_scan_fn`` (its ``selective_scan_cuda``
  kernel), when importable.

Correctness first: each implementation's forward is compared with the float64 reference on a slice
of channels, and one that fails its check is not timed. Times are medians (CPU: wall clock over
``reps`` calls after a warm-up; CUDA: ``triton.testing.do_bench`` when Triton is installed, CUDA
events otherwise). Forward and forward+backward (all gradients) are timed separately.

This module computes and formats; the ``ssmscan bench`` command prints and plots.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ssmscan.ops.selective_scan.api import selective_scan
from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.testing import make_selective_scan_inputs, rel_error, tolerance

ARGS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "delta_softplus")
ScanFn = Callable[..., torch.Tensor]


def loop_anchor(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    z: torch.Tensor,
    delta_bias: torch.Tensor,
    delta_softplus: bool,
) -> torch.Tensor:
    """The sequential loop as the PyTorch reference implementations write it.

    Args:
        u, delta, z: (batch, dim, L) float32.
        A: (dim, N); B, C: (batch, N, L); D, delta_bias: (dim,).
        delta_softplus: apply softplus to ``delta + delta_bias``.

    Returns:
        (batch, dim, L): ``y * silu(z)`` as ``ssmscan.selective_scan`` computes it.

    Example:
        >>> import torch
        >>> from ssmscan.testing import make_selective_scan_inputs
        >>> kw = make_selective_scan_inputs(1, 4, 5, 3)
        >>> out = loop_anchor(**{k: kw[k] for k in ARGS})
        >>> out.shape
        torch.Size([1, 4, 5])
    """
    dt = delta + delta_bias[:, None]
    if delta_softplus:
        dt = F.softplus(dt)
    delta_a = torch.exp(torch.einsum("bdl,dn->bdln", dt, A))
    delta_b_u = torch.einsum("bdl,bnl,bdl->bdln", dt, B, u)
    x = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for i in range(u.shape[2]):
        x = delta_a[:, :, i] * x + delta_b_u[:, :, i]
        ys.append(torch.einsum("bdn,bn->bd", x, C[:, :, i]))
    y = torch.stack(ys, dim=2) + u * D[:, None]
    return y * F.silu(z)


def _ssmscan(**kw: Any) -> torch.Tensor:
    out = selective_scan(**kw, impl="auto")
    assert isinstance(out, torch.Tensor)  # return_last_state=False: the output alone
    return out


def _mamba_ssm() -> tuple[ScanFn | None, str]:
    """mamba-ssm's ``selective_scan_fn`` and a note, or None and why it is missing."""
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except Exception as e:  # ImportError, or a CUDA extension that fails to load
        return None, f"mamba-ssm's selective_scan_cuda is not importable ({type(e).__name__}: {e})"
    return selective_scan_fn, "mamba-ssm's selective_scan_fn (selective_scan_cuda)"


def implementations(device: str) -> tuple[dict[str, ScanFn], list[str]]:
    """The implementations timed on ``device`` (ssmscan first, then the anchors) and notes.

    Args:
        device: ``"cpu"`` or ``"cuda"``.

    Returns:
        ``(impls, notes)``: name -> function taking the keyword arguments in ``ARGS``; notes say
        which anchor is missing and why.

    Example:
        >>> sorted(implementations("cpu")[0])
        ['loop', 'ssmscan']
    """
    if device == "cpu":
        return {"ssmscan": _ssmscan, "loop": loop_anchor}, []
    fn, note = _mamba_ssm()
    impls: dict[str, ScanFn] = {"ssmscan": _ssmscan}
    if fn is not None:
        impls["mamba-ssm"] = fn
    return impls, [note]


@dataclass
class BenchRow:
    """One implementation at one length.

    Attributes:
        impl: implementation name.
        shape: (batch, dim, L, N).
        rel_error: forward error against float64 on a channel slice (``max|x - ref| / max|ref|``).
        ok: whether the error is within the float32 tolerance (only then is it timed).
        fwd_ms, fwd_bwd_ms: median times in milliseconds (None when not timed).
        skipped: why a correct implementation was not timed (the loop above ``anchor_max_len``).
    """

    impl: str
    shape: tuple[int, int, int, int]
    rel_error: float
    ok: bool
    fwd_ms: float | None = None
    fwd_bwd_ms: float | None = None
    skipped: str | None = None


@dataclass
class BenchResult:
    """Everything one benchmark run measured.

    Attributes:
        device: ``"cpu"`` or ``"cuda"``.
        rows: one per (length, implementation).
        notes: missing anchors and other remarks.
        meta: date, device name, versions, threads.
    """

    device: str
    rows: list[BenchRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of the result."""
        return asdict(self)


def _inputs(shape: tuple[int, int, int, int], device: str, requires_grad: bool) -> dict[str, Any]:
    batch, dim, L, N = shape
    kw = make_selective_scan_inputs(batch, dim, L, N, seed=0, device=device)
    out = {k: kw[k] for k in ARGS}
    if requires_grad:
        for k, v in out.items():
            if isinstance(v, torch.Tensor):
                out[k] = v.detach().requires_grad_(True)
    return out


def check(fn: ScanFn, shape: tuple[int, int, int, int], device: str, channels: int = 8) -> float:
    """Relative error of ``fn``'s forward against the float64 reference on the first channels."""
    kw = _inputs(shape, device, requires_grad=False)
    with torch.no_grad():
        out = fn(**kw)[:, :channels]
    per_channel = {"u", "delta", "z"}
    per_dim = {"A", "D", "delta_bias"}
    sl: dict[str, Any] = {}
    for k, v in kw.items():
        if k in per_channel:
            v = v[:, :channels]
        elif k in per_dim:
            v = v[:channels]
        sl[k] = v.double().cpu() if isinstance(v, torch.Tensor) else v
    ref = selective_scan_reference(**sl)
    assert isinstance(ref, torch.Tensor)
    return rel_error(out, ref)


def _median_ms(call: Callable[[], Any], device: str, reps: int, warmup: bool = True) -> float:
    if device == "cuda":
        try:
            import triton.testing

            return float(triton.testing.do_bench(call, return_mode="median"))
        except ImportError:
            pass
    if warmup:
        call()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def time_impl(
    fn: ScanFn, shape: tuple[int, int, int, int], device: str, reps: int, warmup: bool = True
) -> tuple[float, float]:
    """Median forward and forward+backward times of ``fn`` in milliseconds (``warmup``: one
    untimed call of each first)."""
    kw = _inputs(shape, device, requires_grad=False)

    def fwd() -> None:
        with torch.no_grad():
            fn(**kw)

    kw_grad = _inputs(shape, device, requires_grad=True)
    dout = torch.randn(shape[0], shape[1], shape[2], generator=torch.Generator().manual_seed(1)).to(
        device
    )
    tensors = [v for v in kw_grad.values() if isinstance(v, torch.Tensor)]

    def fwd_bwd() -> None:
        out = fn(**kw_grad)
        torch.autograd.grad(out, tensors, dout)

    return _median_ms(fwd, device, reps, warmup), _median_ms(fwd_bwd, device, reps, warmup)


def run(
    device: str,
    lengths: list[int],
    batch: int,
    dim: int,
    d_state: int,
    reps: int,
    anchor_reps: int,
    anchor_max_len: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> BenchResult:
    """Check and time every implementation for ``device`` at each length.

    Args:
        device: ``"cpu"`` or ``"cuda"``.
        lengths: sequence lengths L.
        batch, dim, d_state: the other sizes (u is (batch, dim, L); the state has d_state).
        reps: timed calls per median for ssmscan (and mamba-ssm).
        anchor_reps: timed calls per median for the sequential loop (slow; no warm-up call
            beyond the correctness check, which runs its forward once).
        anchor_max_len: the sequential loop is timed only up to this length (its backward
            materializes a (batch, dim, L, N) gradient per step: O(L^2) memory traffic, a minute
            per call at L=2048, dim 256); None: no limit.
        progress: called with a line of text as each measurement starts and as it finishes.

    Returns:
        A :class:`BenchResult`.

    Example:
        >>> res = run("cpu", [8], batch=1, dim=4, d_state=2, reps=1, anchor_reps=1)
        >>> [(r.impl, r.ok) for r in res.rows]
        [('ssmscan', True), ('loop', True)]
    """
    impls, notes = implementations(device)
    result = BenchResult(device, notes=notes, meta=metadata(device))
    tol = tolerance(torch.float32)
    steps, k = len(lengths) * len(impls), 0
    for L in lengths:
        shape = (batch, dim, L, d_state)
        for name, fn in impls.items():
            k += 1
            if progress is not None:
                progress(f"[{k}/{steps}] L={L} {name}: checking against float64 and timing ...")
            err = check(fn, shape, device)
            row = BenchRow(name, shape, err, ok=err <= tol)
            is_loop = name == "loop"
            if row.ok and is_loop and anchor_max_len is not None and L > anchor_max_len:
                row.skipped = f"L > anchor_max_len={anchor_max_len}"
            elif row.ok:
                n = anchor_reps if is_loop else reps
                row.fwd_ms, row.fwd_bwd_ms = time_impl(fn, shape, device, n, warmup=not is_loop)
            result.rows.append(row)
            if progress is not None:
                if not row.ok:
                    timed = f"FAILS its check (rel err {err:.1e} > {tol:.0e}); not timed"
                elif row.skipped:
                    timed = f"correct, not timed ({row.skipped})"
                else:
                    timed = f"fwd {row.fwd_ms:.3f} ms, fwd+bwd {row.fwd_bwd_ms:.3f} ms"
                progress(f"[{k}/{steps}] L={L} {name}: {timed}")
    return result


def metadata(device: str) -> dict[str, Any]:
    """Date, device, versions and threads of this run."""
    import platform
    import sys

    meta: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
    }
    if device == "cuda":
        meta["device_name"] = torch.cuda.get_device_name()
    else:
        meta["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return meta


def format_table(result: BenchResult) -> str:
    """A Markdown table: one line per length, each implementation's times and ssmscan's speedup
    over each anchor (anchor time / ssmscan time)."""
    impls = list(dict.fromkeys(r.impl for r in result.rows))
    anchors = [i for i in impls if i != "ssmscan"]
    head = ["B,D,L,N"]
    for i in impls:
        head += [f"{i} fwd ms", f"{i} fwd+bwd ms"]
    for a in anchors:
        head += [f"speedup vs {a} fwd", "fwd+bwd"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by = {(r.shape, r.impl): r for r in result.rows}

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}" if x < 10 else f"{x:.1f}"

    def ratio(a: float | None, o: float | None) -> str:
        return "-" if a is None or o is None else f"{a / o:.1f}x"

    for shape in dict.fromkeys(r.shape for r in result.rows):
        cells = [",".join(map(str, shape))]
        for i in impls:
            r = by.get((shape, i))
            cells += [ms(r.fwd_ms if r else None), ms(r.fwd_bwd_ms if r else None)]
        ours = by.get((shape, "ssmscan"))
        for a in anchors:
            r = by.get((shape, a))
            cells += [
                ratio(r.fwd_ms if r else None, ours.fwd_ms if ours else None),
                ratio(r.fwd_bwd_ms if r else None, ours.fwd_bwd_ms if ours else None),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(result: BenchResult, path: str) -> None:
    """Write a PNG of median time against L per implementation (forward, forward+backward).

    Needs matplotlib (the ``bench`` extra); uses the non-interactive Agg backend.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    impls = list(dict.fromkeys(r.impl for r in result.rows))
    for ax, attr, title in zip(axes, ("fwd_ms", "fwd_bwd_ms"), ("forward", "forward + backward")):
        for impl in impls:
            pts = [
                (r.shape[2], getattr(r, attr))
                for r in result.rows
                if r.impl == impl and getattr(r, attr) is not None
            ]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", label=impl)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length L")
        ax.set_ylabel("median time (ms)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    if result.rows:
        b, d, _, n = result.rows[0].shape
        fig.suptitle(f"selective scan, {result.device}, batch {b}, dim {d}, N {n}, float32")
    fig.savefig(path, dpi=100)
    plt.close(fig)
