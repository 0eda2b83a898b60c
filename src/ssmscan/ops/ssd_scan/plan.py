"""Launch plan of the SSD Triton kernels: a pure, cached function from a call's head geometry,
dtype and the device's facts to a frozen plan (chunk length, block sizes, warps, the matmul
precision of float32 operands).

The launchers (``triton_fwd.launch``, ``triton_bwd.launch``) take a plan and hold no policy of
their own; the op asks ``plan_ssd`` through ``plan_for``; an experiment passes a plan of its own
(``dataclasses.replace`` of a planned one). Neither the batch nor the length enters the plan: it
must not change as L varies under dynamic shapes, and it stays cached.

The chunk length is the kernels' own: the ``chunk_size`` argument of the op is the CPU kernel's
(``common.plan_chunk_size``); it changes the rounding, never the result, so the GPU kernels use
the chunk their register tiles are sized for. ``tests/ops/ssd_scan/test_triton_plan.py``
tabulates the plans.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ssmscan.ops.common.device import H200, INTERPRETED, DeviceFacts, device_facts
from ssmscan.ops.common.host_math import next_pow2

MIN_DOT = 16  # the smallest dimension of a Triton ``tl.dot`` operand


@dataclass(frozen=True)
class SSDPlan:
    """How the SSD kernels run one head geometry (``plan_ssd``).

    Args:
        chunk: Q, the backward's steps per chunk (a power of two, at least 16).
        block_p: the step of the dx / dt kernel's loop over headdim.
        block_n: the step of the dx / dt kernel's loop over dstate.
        precision: ``tl.dot`` input precision for float32 inputs ("ieee", "tf32x3" or
            "tf32").
        warps_dx, warps_dbc: ``num_warps`` of the dx / dt and dB / dC kernels.
        stages: ``num_stages`` of the dx / dt and dB / dC kernels.
        f32_dot: matmul operands may stay float32 (TF32 on the tensor cores) for 16-bit
            inputs, instead of being rounded to x's dtype as mamba-ssm does: the backward's
            kernels where their own fields (``walks_f32_dot``, ``dx_f32_dot``, ``dbc_f32_dot``)
            say so, and C·Bᵀ where B and C are not both 16-bit (16-bit B and C multiply as
            they are: their products are exact either way). The planner rounds every operand
            of 16-bit inputs; each field's comment in ``_plan_ssd`` gives the errors.
        emulate: the kernels run under Triton's interpreter: ``_dot`` rounds the operands as
            the tensor cores would and multiplies in float32.
        walk_block_p, walk_block_n: the backward's dstates walk's headdim block and dstate
            block (each tile writes its partial sum of ``dk``).
        warps_walk, walk_stages: its ``num_warps`` and ``num_stages``.
        states_walk_block_p, states_walk_block_n: the states walk's tile (the forward's first
            launch and the backward's chunk states);
            warps_states_walk, states_walk_stages: its ``num_warps`` and ``num_stages``.
        dbc_heads: heads of a group per program of the backward's dB / dC kernel (more: their
            fp32 partial sums, summed afterwards).
        dbc_block_p, dbc_block_n: that kernel's loop step over headdim and its dstate block.
        fwd_chunk: the forward's chunk (Note [SSD Triton forward]: the states walk writes the
            state entering each chunk, the output kernel reads them out, every chunk in
            parallel).
        fwd_states_16: the states entering each chunk are stored in x's dtype (16-bit
            inputs; float32 keeps float32).
        fwd_f32_dot: the forward's derived matmul operands stay float32 for 16-bit inputs
            (else rounded to x's dtype, as mamba-ssm does).
        out_block_p, out_block_n, warps_out, out_stages: the output kernel's headdim block,
            dstate step, ``num_warps`` and ``num_stages``.
        cb_once: the backward's dx / dt kernel reads ``C Bᵀ`` computed once per chunk and
            group (Note [SSD C·Bᵀ once per group] in ``triton_fwd``) instead of computing it
            once per head.
        bwd_states_16: the backward stores the states entering each chunk and their gradients
            in x's dtype (16-bit inputs), as mamba-ssm's backward does, instead of float32: half
            the bytes its dx / dt and dB / dC kernels read (the walks keep the state and its
            gradient in float32 on chip).
        dbc_f32_dot: the dB / dC kernel's matmul operands follow ``f32_dot``; else they are
            rounded to x's dtype (16-bit inputs), as mamba-ssm rounds them: dB and dC are its
            only outputs, while dA and d(dt), the gradients ``f32_dot`` keeps accurate, come from
            the dx / dt kernel.
        dx_f32_dot: the dx / dt kernel's matmul operands follow ``f32_dot``; else they are
            rounded to x's dtype (16-bit inputs), as mamba-ssm rounds them; its sums, and the
            decays and their gradients, stay float32.
        walks_f32_dot: the backward's walks' matmul operands (``x e`` and B in the states walk,
            ``g w`` and C in the dstates walk) follow ``f32_dot``; else they are rounded to x's
            dtype (16-bit inputs), as in the forward's states walk.
        da_sums: the dx / dt kernel takes the decay matrix's part of the log-decays' gradient
            as a difference of its row and column sums (a reverse cumsum of that difference)
            instead of a reverse cumsum over the (chunk, chunk) tile and a masked row sum: fewer
            instructions, but float32 keeps the difference to about 3e-4 of dA at strong decays
            (Note [SSD Triton backward], 4).
        split_walk_programs: a walk with fewer programs than this (batch x heads x its state
            tiles) is split into parts of its sequence walked in parallel (Note [SSD split
            walks] in ``triton_walk``); 0: never split.
        split_walk_min_chunks: the fewest chunks a part of a split walk takes.
        split_pass_block: state elements per program of the pass over a split walk's parts.

    Example:
        >>> SSDPlan(64, 32, 32, "ieee", 8, 8, 2).chunk
        64
    """

    chunk: int
    block_p: int
    block_n: int
    precision: str
    warps_dx: int
    warps_dbc: int
    stages: int
    f32_dot: bool = True
    emulate: bool = False
    walk_block_p: int = 64
    walk_block_n: int = 128
    warps_walk: int = 8
    walk_stages: int = 2
    states_walk_block_p: int = 64
    states_walk_block_n: int = 64
    warps_states_walk: int = 4
    states_walk_stages: int = 2
    dbc_heads: int = 8
    dbc_block_p: int = 32
    dbc_block_n: int = 32
    fwd_chunk: int = 64
    fwd_states_16: bool = True
    fwd_f32_dot: bool = False
    out_block_p: int = 64
    out_block_n: int = 64
    warps_out: int = 8
    out_stages: int = 2
    cb_once: bool = False
    bwd_states_16: bool = False
    dbc_f32_dot: bool = True
    dx_f32_dot: bool = True
    da_sums: bool = False
    walks_f32_dot: bool = True
    split_walk_programs: int = 0
    split_walk_min_chunks: int = 16
    split_pass_block: int = 1024


def _pad(n: int) -> int:
    return max(MIN_DOT, next_pow2(n))


def plan_ssd(
    nheads: int,
    headdim: int,
    ngroups: int,
    dstate: int,
    dtype: torch.dtype,
    facts: DeviceFacts,
    matmul_precision: str = "highest",
) -> SSDPlan:
    """The plan of an SSD call.

    Q = 64, forward and backward: the intra-chunk (Q, Q) decay and C·Bᵀ tiles stay in
    registers, and the (headdim, dstate) states written per chunk (the largest memory traffic:
    up to 4·headdim·dstate bytes per head and chunk, against 2·Q·headdim of x) are amortized over
    64 steps. The walks' tiles are (64, 64); the output kernel's headdim block 64 and the dx / dt
    kernel's loop steps 32 x 32 (32 x 64 for 16-bit inputs, measured faster though the kernel
    spills, ``tests/ops/ssd_scan/sm90_compile_check.py`` reports by how much). float32 inputs use 3xTF32 on devices with tensor cores
    (the float32 tolerance, 1e-5 max-normalized, rules out plain TF32's ~3e-4; its split
    operands still spill 0.4-0.5 KB in the backward kernels), IEEE float32 elsewhere and under
    the interpreter. A caller that allows TF32 for float32 matmuls (``matmul_precision`` "high"
    or "medium", PyTorch's ``torch.set_float32_matmul_precision`` words, which ``plan_for``
    passes) gets plain TF32 on the tensor cores, as mamba-ssm runs float32 inputs: operands
    rounded to a 10-bit mantissa, float16's tolerance rather than float32's.

    Args:
        nheads, headdim, ngroups, dstate: the head geometry (ints).
        dtype: x's dtype.
        facts: the device's ``DeviceFacts``.
        matmul_precision: "highest" (the float32 tolerance), "high" or "medium" (TF32 allowed).

    Returns:
        A frozen ``SSDPlan``; cached.

    Example:
        >>> p = plan_ssd(24, 64, 1, 128, torch.bfloat16, H200)
        >>> p.chunk, p.fwd_chunk, p.block_p, p.block_n, p.precision
        (64, 64, 32, 64, 'tf32')
    """
    if matmul_precision not in ("highest", "high", "medium"):
        raise ValueError(
            f"plan_ssd: matmul_precision must be 'highest', 'high' or 'medium' (PyTorch's "
            f"float32 matmul precisions); got {matmul_precision!r}"
        )
    tf32 = matmul_precision != "highest" and dtype == torch.float32  # 16-bit: one plan
    return _plan_ssd(int(nheads), int(headdim), int(ngroups), int(dstate), dtype, facts, tf32)


@functools.lru_cache(maxsize=1024)
def _plan_ssd(
    nheads: int,
    headdim: int,
    ngroups: int,
    dstate: int,
    dtype: torch.dtype,
    facts: DeviceFacts,
    tf32: bool,
) -> SSDPlan:
    del nheads, ngroups  # the per-chunk work of a head does not depend on them
    pp, np_ = _pad(headdim), _pad(dstate)
    if dtype == torch.float32:
        tensor_cores = facts.compiled and facts.capability >= (8, 0)
        precision = ("tf32" if tf32 else "tf32x3") if tensor_cores else "ieee"
    else:
        precision = "tf32"  # 16-bit inputs' float32 operands (f32_dot); Triton's default
    chunk = 64
    wide = chunk * min(pp, 64) >= 64 * 64  # the kernels' (Q, Q) / (Q, block) float32 tiles
    return SSDPlan(
        chunk=chunk,
        block_p=min(pp, 32),
        # 16-bit inputs: 64 (with the 16-bit backward states below, the dx / dt kernel's
        # C·Sᵀ and B·dSᵀ multiply 16-bit tiles), forward+backward 7.57 -> 7.28 ms at
        # mamba2-2.7b's size and 4.61 -> 4.40 at -130m's (H100, bf16); float32 keeps 32
        block_n=min(np_, 32 if dtype == torch.float32 else 64),
        precision=precision,
        # 4 warps for 16-bit inputs: the backward 8% faster at mamba2-2.7b's size and 6.5% at
        # mamba2-130m's than with 8 (H100), though ptxas then spills 664 bytes a thread with
        # every option on (32 at 8 warps); float32's split operands keep 8
        warps_dx=8 if wide and dtype == torch.float32 else 4,
        # 4 warps for 16-bit inputs (with their 16-bit dB / dC operands below): forward+backward
        # 6.291 -> 6.147 ms at mamba2-2.7b's size (H100, bf16)
        warps_dbc=8 if wide and dtype == torch.float32 else 4,
        stages=2,
        f32_dot=True,
        emulate=not facts.compiled,
        # the walks, forward and backward, at every size; the alternative, each chunk's own
        # state (and read-out gradient) in parallel then a pass over the chunks in place, lost
        # everywhere timed. Backward ms walking against it (H100, bf16, launched directly,
        # 2026-12-06, a dx / dt variant since deleted): (1, 2048, 80, 64, 1, 128) 0.86 / 1.67,
        # (1, 4096, 48) 1.13 / 2.28, (2, 4096, 48) 1.71 / 3.50, (1, 8192, 48) 2.10 / 4.43,
        # (1, 65536, 48) 16.5 / 35.9: the passes loop over every chunk at about 13 and 7 us a
        # chunk step. float32 (3xTF32, whose walking tiles spill 0.15-10 KB a thread, sm_90):
        # forward+backward 20.99 ms walking against 25.96 at mamba2-2.7b's size (H100)
        # the dstates walk: (64, 64) tiles at 4 warps, 2 stages (245-255 registers, no spills,
        # sm_90): the backward 6.5% faster at mamba2-2.7b's and -130m's sizes (H100, bf16)
        # than the whole state row at 8 warps and one stage (1.52 / 0.93 ms a walk); 8 warps
        # at (64, 64) +6%, (32, 64) at 4 warps -3.8 / -2.9%, (32, 128) -3.3% (2.7b)
        walk_block_p=min(pp, 64),
        walk_block_n=min(np_, 64),
        warps_walk=4,
        walk_stages=2,
        # the states walk (the forward's and the backward's) at 4 warps, 2 stages: (64, 64)
        # tiles were the fastest of six for the forward on an H100 at mamba2-2.7b's and -130m's
        # sizes with its operands then (0.40 / 0.23 ms; (64, 128) at 8 warps 0.49 / 0.28, one
        # stage 0.59 / 0.31). 16-bit inputs, with the backward's walks' operands 16-bit too:
        # (64, 128) at 4 warps, forward 0.824 -> 0.791 ms and forward+backward 4.450 -> 4.319
        # at 2.7b's size, 0.488 -> 0.483 and 2.655 -> 2.637 at 130m's (H100, bf16; at 8 warps
        # 0.921 / 4.581, 0.537 / 2.747); float32's split operands keep (64, 64)
        states_walk_block_p=min(pp, 64),
        states_walk_block_n=min(np_, 64 if dtype == torch.float32 else 128),
        warps_states_walk=4,
        states_walk_stages=2,
        # dB / dC: 8 heads a program (fp32 partial sums over a group's splits), the whole
        # dstate up to 128 for 16-bit inputs: g·Xᵀ and the x / dout / z tiles once per head,
        # not once per dstate block (with float32 operands 255 registers and no spills at 8
        # warps; with 16-bit operands at the planned 4 warps ptxas spills 616-716 bytes a
        # thread, sm_90, and that measured faster, below); float32's 3xTF32 operands already
        # spill 0.6 KB at 32 and 2 KB at 128, so they keep 32
        dbc_heads=8,
        dbc_block_p=min(pp, 32),
        dbc_block_n=min(np_, 32 if dtype == torch.float32 else 128),
        # the forward (Note [SSD Triton forward]): the states walk, then the output kernel.
        # 16-bit inputs: it beat the chunk-parallel states and their pass at every size timed
        # with few programs (H100, bf16, ms: (1, 65536, 48, ...) 11.2 -> 3.64, (1, 8192, 48)
        # 1.38 -> 0.60, (4, 2048, 24) 0.90 -> 0.59, (1, 2048, 80) 0.80 -> 0.58, (1, 2048, 24)
        # 1.24 -> 0.80); its derived operands and the states it stores rounded to x's dtype as
        # mamba-ssm rounds them (float32 states: 1.31x its time at mamba2-2.7b's size; TF32
        # operands 1.44x). Measured on an H100 at mamba2-2.7b's and -130m's sizes (bf16):
        # chunk 64 (128: the states walk 17% faster, the output kernel's (128, 128) tile 254
        # registers and 1.4x slower); the output kernel at 4 warps (0.43 / 0.27 ms; 8 warps
        # 0.57 / 0.33; headdim block 32 0.69 / 0.41). float32 (its states and operands float32,
        # 3xTF32): 5.74 -> 2.34 ms at mamba2-2.7b's size (H100; only that size timed)
        fwd_chunk=chunk,
        fwd_states_16=True,
        fwd_f32_dot=False,
        out_block_p=min(pp, 64),
        out_block_n=min(np_, 64),
        warps_out=4,
        out_stages=2,
        # 16-bit inputs: -3.4 / -3.2% on the backward at mamba2-2.7b's and -130m's sizes (H100,
        # bf16); float32 not timed
        cb_once=dtype != torch.float32,
        # 16-bit inputs: the states entering each chunk and their gradients stored in x's dtype
        # between the walks and the dx / dt and dB / dC kernels, as mamba-ssm's backward stores
        # them: forward+backward 8.35 -> 7.57 ms at mamba2-2.7b's size, 5.17 -> 4.61 at -130m's
        # (H100, bf16; dx / dt 3.38 -> 3.10 ms, dB / dC 2.50 -> 2.09, the dstates walk 0.96 ->
        # 0.84 at 2.7b); worst gradient errors against float64 unchanged at those sizes (4.2e-3
        # dB, 3.6e-3 dC); at L = 700 under the interpreter dA 2.5e-4 -> 1.7e-3, ddt_bias 2.3e-4
        # -> 5.9e-4, dz 4.0e-3 -> 5.2e-3 (tolerance 1.5e-2)
        bwd_states_16=dtype != torch.float32,
        # 16-bit inputs: the dB / dC kernel's operands rounded to x's dtype: its time 2.10 ->
        # 1.06 ms, forward+backward 7.17 -> 6.29 ms at mamba2-2.7b's size (H100, bf16); worst
        # errors against float64 there dB 4.2e-3 -> 4.4e-3, dC (130m) 3.6e-3 -> 4.3e-3
        dbc_f32_dot=dtype == torch.float32,
        # 16-bit inputs: the dx / dt kernel's operands rounded to x's dtype too (its spills
        # 556 -> 148 bytes a thread at 4 warps, sm_90): forward+backward 5.85 -> 5.14 ms at
        # mamba2-2.7b's size, 3.58 -> 3.16 at -130m's, 5.04 -> 4.39 at the Codestral-like
        # (H200, bf16); worst errors against float64 at L 64-1000 (interpreter, headdim 64,
        # dstate 128) dx 7.0e-3, dA 8.3e-3, ddt 4.2e-3 (tolerance 1.5e-2). At 8 warps (no
        # spills) or headdim block 64 at 8 warps it was slower: 6.60 / 5.93 ms at 2.7b's size
        dx_f32_dot=dtype == torch.float32,
        # 16-bit inputs: forward+backward 5.09 -> 4.92 ms at mamba2-2.7b's size, 3.07 -> 2.96 at
        # -130m's (H100, bf16; the dx / dt kernel 1.84 -> 1.65 ms at 2.7b); worst errors against
        # float64 unchanged at the interpreter's strong decays (A = -24, dt ~ 3: dA 7.4e-4,
        # tolerance 1.5e-2). float32 keeps the tile's cumsum: this difference took dA to 3.2e-4
        # there against the 1e-5 tolerance
        da_sums=dtype != torch.float32,
        # 16-bit inputs: the walks' operands rounded to x's dtype (as the forward's states walk
        # rounds them): forward+backward 4.74 -> 4.44 ms at mamba2-2.7b's size, 2.95 -> 2.65 at
        # -130m's (H100, bf16; the states walk alone 4.70 / 2.83, the dstates walk alone 4.58 /
        # 2.77); worst errors against float64 at L 150-700 (interpreter, GPU rounding emulated,
        # headdim 16 / 32, dstate 32 / 64) near the TF32 operands' (dA 4.0e-3 against 3.5e-3,
        # ddt_bias 6.2e-3 against 6.0e-3, dinitial_states 2.9e-3 against 3.4e-4)
        walks_f32_dot=dtype == torch.float32,
        # Note [SSD split walks] in ``triton_walk``: a walk of fewer than 4 programs a
        # multiprocessor over at least 128 chunks (8192 steps) runs in parts of at least 64
        # chunks. H100, bf16, ms forward / forward+backward (parts of at least 16 chunks, as
        # many as reach 528 programs): (1, 65536, 48, 64, 1, 128) 3.82 / 16.18 -> 2.46 / 13.47
        # (11 parts; 22 parts 2.55 / 12.90), (1, 8192, 48) 0.46 / 2.08 -> 0.35 / 1.96; over 32-64
        # chunks the extra reads cost more than the parts gain: (2, 4096, 48) forward 0.31 ->
        # 0.34, (1, 2048, 80) 0.15 -> 0.18, mamba2-130m's size (384 programs, 2 parts) 0.48 /
        # 2.70 -> 0.60 / 2.88. Planned (a second call): 2.46 / 13.47 at 65536 tokens, 0.45 / 2.43
        # at 8192 (2 parts; 4 parts 0.37 / 2.13), forward+backward times over 32-128 chunks moving
        # by up to 40% between calls
        split_walk_programs=4 * facts.sm_count,
        split_walk_min_chunks=64,
    )


def plan_for(x: torch.Tensor, B: torch.Tensor) -> SSDPlan:
    """The planner's plan for a call with these ``x`` (batch, L, nheads, headdim) and ``B``
    (batch, L, ngroups, dstate), on their device, at the caller's float32 matmul precision
    (``torch.get_float32_matmul_precision()``: "highest" unless the caller allowed TF32)."""
    _, _, nheads, headdim = x.shape
    return plan_ssd(nheads, headdim, B.shape[2], B.shape[3], x.dtype, device_facts(x.device),
                    torch.get_float32_matmul_precision())  # fmt: skip


__all__ = ["H200", "INTERPRETED", "SSDPlan", "plan_for", "plan_ssd"]
