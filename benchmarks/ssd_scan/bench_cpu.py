"""CPU benchmark of ssmscan.ssd_scan against the pure-PyTorch SSD anchors, side by side.

    python benchmarks/ssd_scan/bench_cpu.py [--shape 1,2048,24,64,128] [--reps 5] [--skip NAME]
    python benchmarks/ssd_scan/bench_cpu.py --decode     # one decode step, batch 1 and 64
    python benchmarks/ssd_scan/bench_cpu.py --sweep      # the chunk-size table of the planner

Figures in src/ssmscan/ops/ssd_scan/README.md were taken with ``taskset -c 0,1`` and
OMP_NUM_THREADS=2 on an idle host; on a machine shared with other jobs use ``--threads 1``
(OpenMP barriers stall when a core is taken away mid-op, which punishes many small ops).

Shape is (batch, L, nheads, headdim, dstate), ngroups 1, fp32, in Mamba-2's configuration:
dt_bias with softplus, D per head, A = -exp(0.5 * randn), dt in [1e-3, 0.1]; by default
(1, 2048, 24, 64, 128) and (4, 1024, 48, 64, 128). Variants:

* ``ssmscan``: ``ssmscan.ssd_scan`` (the planner's chunk size).
* ``transformers-256``: the SSD part of transformers 5.25's ``Mamba2Mixer.forward`` on CPU
  (its torch path): ``mamba2_scan_forward`` calls ``mamba2_chunk_scan`` with the mixer's
  ``chunk_size`` (Mamba2Config's default, 256, also mamba2-130m's), D, dt_bias, softplus, z None
  and, when a cache is filled, the final state; timed exactly so, on the same inputs. Before
  timing, ``check_transformers_mixer`` runs ``mamba2_scan_forward`` itself on a mixer built from
  ``Mamba2Config`` holding the same A, D, dt_bias and requires the same output bit for bit. The
  mixer's other steps (projections, convolution, gated norm) are not SSD and not timed.
  ``transformers-64`` is the same function at chunk 64 (faster on CPU; not what the mixer runs).
  Imported from an installed transformers 5.25, else its 5.25 code copied below.
* ``ssd_minimal``: mamba-ssm's ``ssd_minimal_discrete`` (mamba_ssm/modules/ssd_minimal.py,
  Listing 1 of the Mamba-2 paper), copied below with its einops rearranges written as torch
  reshapes, at block 64 (its fastest here) and 256; it needs L divisible by the block.

Correctness first: every variant's output and final state are checked against the float64
sequential reference, and, for the forward+backward timing, its gradients against autograd of
the float64 chunked reference (itself equal to the sequential one to 1e-15); a variant that fails
its check is not timed. Times are medians of ``--reps`` runs after one warm-up, the variants run
round-robin. Peak memory: the most bytes held at once by tensors allocated during one timed step
(temporaries and results; inputs existing before the call not counted), from the profiler's
allocation events, over the bytes of the step's inputs and outputs (forward: x, dt, A, B, C, D,
dt_bias, out, final state; forward+backward: twice that, for the incoming gradients and the
gradients of the inputs).

``--decode`` times ``ssmscan.selective_state_update`` (in place, Mamba-2 layout, state
(batch, 24, 64, 128): mamba2-130m's heads) against transformers 5.25's per-token path, the
recurrent branch of ``mamba2_scan_forward``: a clone of the cached state and
``mamba2_selective_state_update`` on it (``transformers``; ``transformers-step`` without the
clone), both checked against the float64 reference first.
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
from ssmscan.testing.memory import cpu_peak_bytes


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


# --- transformers 5.25's mamba2_chunk_scan (models/mamba2/modeling_mamba2.py), copied --------
# Used when the installed transformers is another version (5.17's path ran 30x slower than
# ssd_minimal_discrete on one host, 5.25's about as fast: a different anchor). Apache-2.0,
# the HuggingFace team.
def _tf_pad_tensor_by_size(input_tensor: torch.Tensor, pad_size: int):
    """
    Padding x tensor with `pad_size` on the seq_len dim (dim=1)

    Assumes that we only have tensors of either size 4 or 3
    """
    pad_shape = (
        (0, 0, 0, 0, 0, pad_size, 0, 0)
        if len(input_tensor.shape) == 4
        else (0, 0, 0, pad_size, 0, 0)
    )

    return torch.nn.functional.pad(input_tensor, pad_shape, mode="constant", value=0)


def _tf_reshape_into_chunks(input_tensor, pad_size, chunk_size):
    """
    Padding input_tensor with `pad_size` on the seq_len dim (dim=1) and
    simultaneously splitting it into chunk sequences.

    Assumes that we only have tensors of either size 4 or 3
    """
    # [bsz, seq_len, ...] -> [bsz, seq_len multiple of chunk_size, ...]
    input_tensor = _tf_pad_tensor_by_size(input_tensor, pad_size)

    if len(input_tensor.shape) == 3:
        # [bsz, seq_len multiple of chunk_size, num_heads] -> [bsz, -1, chunk_size, num_heads]
        return input_tensor.reshape(input_tensor.shape[0], -1, chunk_size, input_tensor.shape[2])
    else:
        # [bsz, seq_len multiple of chunk_size, num_heads, head_dim or state_size] -> [bsz, -1, chunk_size, num_heads, head_dim or state_size]
        return input_tensor.reshape(
            input_tensor.shape[0], -1, chunk_size, input_tensor.shape[2], input_tensor.shape[3]
        )


def _tf_segment_sum(input_tensor):
    """
    More stable segment sum calculation. Uses cumulative sums and masking instead of direct subtractions.
    """
    chunk_size = input_tensor.size(-1)
    # 1. expand input tensor to have an additional dimension and repeat along that dimension
    # [..., chunk_size] -> [..., chunk_size, chunk_size]
    input_tensor = input_tensor[..., None].expand(*input_tensor.size(), chunk_size)
    # 2. create a lower triangular mask with the diagonal set to 0 to 0 out elements above diag
    mask = torch.tril(
        torch.ones(chunk_size, chunk_size, device=input_tensor.device, dtype=torch.bool),
        diagonal=-1,
    )
    input_tensor = input_tensor.masked_fill(~mask, 0)
    # 3. compute actual cumsum
    tensor_segsum = torch.cumsum(input_tensor, dim=-2)

    # 4. apply mask to keep only the lower triangular part of the cumulative sum result (incl diagonal this time)
    mask = torch.tril(
        torch.ones(chunk_size, chunk_size, device=input_tensor.device, dtype=torch.bool), diagonal=0
    )
    tensor_segsum = tensor_segsum.masked_fill(~mask, -torch.inf)
    return tensor_segsum


def _tf525_mamba2_chunk_scan(
    hidden_states: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    **kwargs,
):
    batch_size, sequence_length, num_heads, head_dim = hidden_states.shape
    num_groups = B.shape[2]

    if dt_bias is not None:
        dt = dt + dt_bias.to(dt.dtype)
    if dt_softplus:
        dt = F.softplus(dt)
    dt = torch.clamp(dt, min=dt_limit[0], max=dt_limit[1])

    hidden_states = hidden_states.float()
    B = B.float().repeat_interleave(num_heads // num_groups, dim=2, output_size=num_heads)
    C = C.float().repeat_interleave(num_heads // num_groups, dim=2, output_size=num_heads)

    pad_size = (chunk_size - sequence_length % chunk_size) % chunk_size
    D_residual = None
    if D is not None:
        D_residual = D[..., None] * _tf_pad_tensor_by_size(hidden_states, pad_size)

    # Discretize x and A
    hidden_states = hidden_states * dt[..., None].float()
    A = A.to(hidden_states.dtype) * dt.float()

    # Rearrange into blocks/chunks. This fixes the layout the einsums below are written against:
    # b = batch, c = chunk index, l and s = positions within a chunk, h = head, p = head_dim,
    # n = ssm state. So hidden_states is (b, c, l, h, p) and B and C are (b, c, l, h, n).
    hidden_states, A, B, C = [
        _tf_reshape_into_chunks(tensor, pad_size, chunk_size) for tensor in (hidden_states, A, B, C)
    ]

    A = A.permute(0, 3, 1, 2)
    A_cumsum = torch.cumsum(A, dim=-1)

    # 1. Compute the output for each intra-chunk (diagonal blocks)
    # This is the analog of a causal mask
    L = torch.exp(_tf_segment_sum(A))

    # Contraction of C and B to get G (attention-weights like): sum over the state n, leaving a
    # position-by-position score per head. (b,c,l,h,n) x (b,c,s,h,n) -> (b,c,l,s,h).
    G = torch.einsum("bclhn,bcshn->bclsh", C, B)

    # Compute M, equivalent to applying attention mask to weights
    M = G * L.permute(0, 2, 3, 4, 1)

    # Compute Y_diag (apply to values): sum over the source position s. (b,c,l,s,h) x (b,c,s,h,p)
    # -> (b,c,l,h,p).
    Y_diag = torch.einsum("bclsh,bcshp->bclhp", M, hidden_states)

    # 2. Compute the state for each intra-chunk
    # (right term of low-rank factorization of off-diagonal blocks; B terms)
    decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
    B_decay = B * decay_states.permute(0, -2, -1, 1)[..., None]
    # Sum over the positions l in the chunk: (b,c,l,h,n) x (b,c,l,h,p) -> (b,c,h,p,n).
    states = torch.einsum("bclhn,bclhp->bchpn", B_decay, hidden_states)

    # 3. Compute the inter-chunk SSM recurrence; produces correct SSM states at chunk boundaries
    # (middle term of factorization of off-diag blocks; A terms)
    previous_states = (
        initial_states[:, None].to(dtype=states.dtype, device=states.device)
        if initial_states is not None
        else torch.zeros_like(states[:, :1])
    )
    states = torch.cat([previous_states, states], dim=1)
    decay_chunk = torch.exp(_tf_segment_sum(F.pad(A_cumsum[:, :, :, -1], (1, 0)))).transpose(1, 3)
    # Sum over the source chunk z to get each chunk's start state: (b,z,c,h) x (b,z,h,p,n) -> (b,c,h,p,n).
    new_states = torch.einsum("bzch,bzhpn->bchpn", decay_chunk, states)
    states, final_state = new_states[:, :-1], new_states[:, -1]

    # 4. Compute state -> output conversion per chunk
    # (left term of low-rank factorization of off-diagonal blocks; C terms)
    state_decay_out = torch.exp(A_cumsum)
    # Sum over the state n again, now against each chunk's start state: (b,c,l,h,n) x (b,c,h,p,n)
    # -> (b,c,l,h,p).
    C_times_states = torch.einsum("bclhn,bchpn->bclhp", C, states)
    Y_off = C_times_states * state_decay_out.permute(0, 2, 3, 1)[..., None]

    # Add output of intra-chunk and inter-chunk terms (diagonal and off-diagonal blocks).
    # `contiguous` because einsum may return a permuted view, and callers such as FalconH1Mixer
    # call `.view()` on this return value, which a permuted view refuses.
    output = (Y_diag + Y_off).contiguous()
    output = output.reshape(batch_size, -1, num_heads, head_dim)

    if D_residual is not None:
        output = output + D_residual

    # Cutting off padded chunks
    if pad_size > 0:
        output = output[:, :sequence_length]

    if return_final_states:
        return output, final_state

    return output


def _transformers_chunk_scan():
    """transformers' pure-PyTorch SSD: the installed one when it is 5.25, else the copy above."""
    import transformers

    if transformers.__version__ == "5.25.0":
        from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan

        return mamba2_chunk_scan
    return _tf525_mamba2_chunk_scan


def model_chunk_size():
    """The chunk size ``Mamba2Mixer`` runs with: ``Mamba2Config``'s default (mamba2-130m's too)."""
    from transformers import Mamba2Config

    return Mamba2Config().chunk_size


def transformers_variant(chunk):
    """The SSD part of transformers' ``Mamba2Mixer.forward`` on CPU: ``mamba2_scan_forward``'s call
    of ``mamba2_chunk_scan`` for a prefill that fills a cache (D, dt_bias, softplus, the default
    time-step limit, z None: the mixer gates in its norm, not in the scan; final state returned).
    ``check_transformers_mixer`` shows it is the mixer's path, output for output."""
    chunk_scan = _transformers_chunk_scan()

    def run(x, dt, A, B, C, D, dt_bias):
        return chunk_scan(
            x, dt, A, B, C, chunk_size=chunk, D=D, z=None, return_final_states=True,
            dt_bias=dt_bias, dt_softplus=True, initial_states=None, dt_limit=(0.0, float("inf")),
        )  # fmt: skip

    return run


def check_transformers_mixer(kw):
    """``transformers_variant(model_chunk_size())`` equals what ``Mamba2Mixer`` itself runs
    (``mamba2_scan_forward`` of a mixer built from ``Mamba2Config`` holding these A, D, dt_bias),
    bit for bit: the anchor is the mixer's SSD path, not a retuned one."""
    import transformers
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer, mamba2_scan_forward

    if transformers.__version__ != "5.25.0":
        print(f"  (transformers {transformers.__version__}: the mixer check needs 5.25)")
        return True
    b, L, H, P = kw["x"].shape
    N = kw["B"].shape[-1]
    cfg = Mamba2Config(num_heads=H, head_dim=P, hidden_size=H * P // 2, expand=2, state_size=N,
                       n_groups=1, num_hidden_layers=1)  # fmt: skip
    mixer = Mamba2Mixer(cfg, layer_idx=0)
    with torch.no_grad():
        mixer.A_log.copy_(torch.log(-kw["A"]))
        mixer.D.copy_(kw["D"])
        mixer.dt_bias.copy_(kw["dt_bias"])
        want = mamba2_scan_forward(
            mixer, kw["x"].reshape(b, L, H * P), kw["B"].reshape(b, L, N),
            kw["C"].reshape(b, L, N), kw["dt"], None,
        ).reshape(b, L, H, P)  # fmt: skip
        A = -torch.exp(mixer.A_log.float())  # as the mixer forms it
        got = transformers_variant(mixer.chunk_size)(**{**kw, "A": A})[0]
    same = torch.equal(got, want)
    print(f"  transformers-{mixer.chunk_size} is Mamba2Mixer's SSD path: {same}")
    return same


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


def _nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def bench(shape, reps, variants):
    kw = make_inputs(shape)
    print(f"shape (batch, L, nheads, headdim, dstate) = {shape}, fp32, torch {torch.__version__},"
          f" {torch.get_num_threads()} threads")  # fmt: skip
    rows = []
    for mode in ("fwd", "fwd+bwd"):
        with_grads = mode == "fwd+bwd"
        ref = reference_results(kw, with_grads)
        out_ref, final_ref = ref[0], ref[1]
        # inputs and outputs of the timed step: forward, x dt A B C D dt_bias in, out and final
        # state out; forward+backward adds the incoming gradients of out and final and the
        # gradient of every input
        io = _nbytes(*kw.values()) + 4 * (out_ref.numel() + final_ref.numel())
        if with_grads:
            io = 2 * io
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
                    return [v.grad for v in leaves.values()]

            else:

                def step(fn=fn):
                    with torch.no_grad():
                        return fn(**kw)

            steps[name] = step
        medians = _interleaved_medians(steps, reps)
        base = medians.get("ssmscan")
        for name, t in medians.items():
            peak = cpu_peak_bytes(steps[name])
            ratio = f"{t / base:6.2f}x ssmscan" if base else ""
            print(f"  {mode:8s} {name:18s} {t * 1e3:9.1f} ms  {ratio}   peak {peak / 2**20:7.1f} MiB"
                  f" = {peak / io:4.2f}x inputs+outputs")  # fmt: skip
            rows.append((mode, name, t, peak / io))
    return rows


# --- one decode step, Mamba-2 layout ----------------------------------------------------------
def decode_inputs(batch, nheads=24, headdim=64, dstate=128, seed=0):
    """A decode step as Mamba-2 callers pass it: A, dt, D, dt_bias per head, expanded over headdim
    (zero strides); state (batch, nheads, headdim, dstate) float32."""
    g = torch.Generator().manual_seed(seed)
    H, P, N = nheads, headdim, dstate
    return {
        "state": torch.randn(batch, H, P, N, generator=g),
        "x": torch.randn(batch, H, P, generator=g),
        "dt": (0.5 * torch.randn(batch, H, generator=g) - 2.0)[..., None].expand(-1, -1, P),
        "A": (-torch.exp(0.5 * torch.randn(H, generator=g)))[:, None, None].expand(-1, P, N),
        "B": torch.randn(batch, 1, N, generator=g),
        "C": torch.randn(batch, 1, N, generator=g),
        "D": torch.randn(H, generator=g)[:, None].expand(-1, P),
        "dt_bias": (0.5 * torch.randn(H, generator=g) - 2.0)[:, None].expand(-1, P),
    }


def bench_decode(batch, reps):
    """ssmscan.selective_state_update (in place) against transformers 5.25's per-token path:
    ``mamba2_scan_forward``'s recurrent branch clones the cached state and runs
    ``mamba2_selective_state_update`` (torch ops) on the clone; both are timed, the clone
    included ("transformers") and without it ("transformers-step")."""
    from transformers.models.mamba2.modeling_mamba2 import mamba2_selective_state_update

    from ssmscan.ops.selective_state_update.reference import selective_state_update_reference

    kw = decode_inputs(batch)
    rest = {k: v for k, v in kw.items() if k != "state"}
    k64 = {k: v.double() for k, v in kw.items()}
    want_out, want_state = selective_state_update_reference(**k64, dt_softplus=True)

    def tf_step(state):
        r = rest  # positional as mamba2_scan_forward calls it
        return mamba2_selective_state_update(
            state, r["x"], r["dt"], r["A"], r["B"], r["C"], r["D"], z=None,
            dt_bias=r["dt_bias"], dt_softplus=True,
        )  # fmt: skip

    def ours_step(state):
        return ssmscan.selective_state_update(state, **rest, dt_softplus=True)

    tol = tolerance(torch.float32)
    for name, fn in (("ssmscan", ours_step), ("transformers", tf_step)):
        st = kw["state"].clone()
        with torch.no_grad():
            out = fn(st)
        err = max(rel_error(out, want_out), rel_error(st, want_state))
        print(f"  check {name:18s} {err:.1e} ({'ok' if err <= tol else 'FAILED'})")
        if err > tol:
            return []
    # each repeat steps its own copy of the state, so every call sees the same values
    state = kw["state"].clone()
    steps = {
        "ssmscan": lambda: ours_step(state),
        "transformers": lambda: tf_step(state.clone()),
        "transformers-step": lambda: tf_step(state),
    }
    with torch.no_grad():
        for step in steps.values():  # warm-up (first calls load kernels)
            state.copy_(kw["state"])
            step()
        times = {name: [] for name in steps}
        for _ in range(reps):
            for name, step in steps.items():
                state.copy_(kw["state"])
                t0 = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(t) for name, t in times.items()}
    shape = tuple(kw["state"].shape)
    print(f"decode step, state {shape} fp32, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, medians of {reps}")  # fmt: skip
    for name, t in med.items():
        print(f"  {name:18s} {t * 1e6:9.0f} us  {t / med['ssmscan']:6.2f}x ssmscan")
    return [("decode", name, t, None) for name, t in med.items()]


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


SHAPES = ("1,2048,24,64,128", "4,1024,48,64,128")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", action="append", help=f"default: {' and '.join(SHAPES)}")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--decode", action="store_true", help="the decode step, batch 1 and 64")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--skip", action="append", default=[], help="a variant not to run")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.sweep:
        sweep(args.reps)
        return
    if args.decode:
        for batch in (1, 64):
            bench_decode(batch, max(args.reps, 5) * (10 if batch == 1 else 1))
        return
    chunk = model_chunk_size()
    for text in args.shape or SHAPES:
        shape = tuple(int(s) for s in text.split(","))
        variants = {
            "ssmscan": ours(),
            f"transformers-{chunk}": transformers_variant(chunk),
            "transformers-64": transformers_variant(64),
            "ssd_minimal-64": minimal_variant(64),
            "ssd_minimal-256": minimal_variant(256),
        }
        variants = {k: v for k, v in variants.items() if k not in args.skip}
        if shape[1] % 256:
            variants = {k: v for k, v in variants.items() if not k.startswith("ssd_minimal")}
        if not check_transformers_mixer(make_inputs(shape)):
            variants = {k: v for k, v in variants.items() if not k.startswith("transformers")}
        bench(shape, args.reps, variants)


if __name__ == "__main__":
    main()
