"""Launch plans of the selective-scan Triton kernels: pure functions from a call's shape, dtypes,
alignment and the device's facts to a frozen plan (which kernels, blocks, segments, buffers).

The launchers (``triton_fwd.launch``, ``triton_bwd.launch``) take a plan and hold no policy of
their own; the op asks ``plan_forward`` / ``plan_backward`` (cached for concrete sizes), and an
experiment builds its own plan (``dataclasses.replace`` of a planned one, or a planner call with a
``Policy`` of its own). A kernel whose compiled layout fails its check (``LaneLayoutError``) is
replaced for that call by the plan's ``fallback``: nothing is switched for the process.

Device facts (multiprocessors, registers per multiprocessor, compute capability) come from the
device (``ssmscan.ops.common.device.device_facts``). Under Triton's interpreter (CPU tensors)
the planner plans for an H200-sized grid (``INTERPRETED``), so that the interpreter tests walk
the same segment plans as the GPU, without the register-wave fitting that only a GPU has.

Sizes may be symbolic (``torch.SymInt`` under ``torch.compile(dynamic=True)`` or a dynamic-shape
``torch.export``): the plan is then not cached, and no decision guards on a symbolic batch or
length, since an export must hold for every size its ``Dim`` allows: such a call runs unsplit (one
segment), without the whole-tile loop, the 16-bit rows or the wider 2-D blocks that a concrete
size would earn; the sizes only enter the plan's arithmetic (grids, segment length).

``tests/ops/selective_scan/test_plan.py`` tabulates which kernels the planner picks.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

from ssmscan.ops.common.device import H200, INTERPRETED, DeviceFacts, device_facts
from ssmscan.ops.common.host_math import cdiv, next_pow2
from ssmscan.ops.selective_scan.shapes import CHECKPOINT_LEN


@dataclass(frozen=True)
class Policy:
    """The planner's tuning constants (measured on the H200; ``benchmarks/RESULTS.md``).

    Args:
        warps_per_sm: warps per multiprocessor a split backward aims for (16).
        fwd_warps_per_sm: ... a split forward (64: a forward warp holds 8 channels, not 32).
        split_below_warps: L is split into segments only below this many warps (512).
        fwd_warps: warps per forward program (2).
        lane_max_np: the lane forward up to this many padded states (32).
        split_regs: registers of the split lane forward's real pass (its cap beyond
            ``split_cap_waves`` waves).
        split_cap_waves: waves of the real pass beyond which it is capped at ``split_regs``.
        ch2_wave_regs: registers the two-channel real pass's waves are planned for (fp32 rows).
        ch2_wave_regs16: ... with 16-bit B / C rows.
        local_fine: local segments per real segment of a forward split in tiles.
        fold_group: segments the two-channel real pass folds at a time.
        fold_max_segments: the lane backward folds the segments itself up to this many.
        states_maxnreg: register cap of the backward's states kernel.
        sum_unroll: partials per load group of the backward's finish kernel.
        sum_values: values per program and partial of the finish kernel.
        two_channels: the forward's real pass with two channels a thread where its geometry
            and waves allow (Note [selective scan forward two channels a thread]).
        rows16: the lane forward's B / C rows in the inputs' 16-bit dtype "where_fit" (only where
            the fewer registers let the two-channel pass fill its waves) or "always" (wherever
            B and C have u's 16-bit dtype). Note [selective scan forward 16-bit rows].
        even: the lane forward's loop without masks where every tile is whole and every
            program's channels exist, unsplit.
        rs_max_np: off the split path, the backward sums dB / dC by a one-warp reduce-scatter
            ("tile_rs") where the groups allow and the padded state count is at most this; the
            plain 2-D "tile" kernel above it (0: never "tile_rs"). Measured on the H200
            (2026-12-05, forward+backward at batch 8, dim 4096; ``bench_gpu.py`` variant
            ``nors``): "tile_rs" is 5-7% faster at N 16 with L = 2047 and 1-15% at N 8, the
            plain kernel 14% faster at N 64 (fp32, 84 against 98 ms).

    Example:
        >>> Policy().fwd_warps
        2
    """

    warps_per_sm: int = 16
    fwd_warps_per_sm: int = 64
    split_below_warps: int = 512
    fwd_warps: int = 2
    lane_max_np: int = 32
    split_regs: int = 128
    split_cap_waves: int = 2
    ch2_wave_regs: int = 160
    ch2_wave_regs16: int = 128
    local_fine: int = 2
    fold_group: int = 8
    fold_max_segments: int = 16
    states_maxnreg: int = 128
    sum_unroll: int = 8
    sum_values: int = 512
    two_channels: bool = True
    rows16: str = "where_fit"
    even: bool = True
    rs_max_np: int = 32

    def __post_init__(self) -> None:  # the hash once: a policy is part of every plan's cache key
        fields = tuple(getattr(self, f.name) for f in dataclasses.fields(self))
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]


DEFAULT = Policy()
SPLIT_TT = 8  # steps per tile of the split / lane backward
SPLIT_BLOCK_D = 8  # channels per program of the split / lane backward: one warp
LP_ALIGN = 16  # the lane kernels' B / C copies have a multiple of this many steps


# --- geometry ---------------------------------------------------------------------------------


def pad_states(N: int) -> int:
    """Padded state count NP (a power of two, at least 4)."""
    return max(4, next_pow2(N))


def lane_geometry(NP: int) -> tuple[int, int]:
    """(KL, TPL) of Note [selective scan forward lanes]: NP / 4 lanes per channel up to 8, tiles
    of min(NP, 8) steps."""
    kl = max(1, min(NP // 4, 8))
    return kl, min(NP, 8) // kl


def padded_steps(L: int, TT: int) -> int:
    """LP: the steps of the lane kernels' B / C copies, whole tiles and one more for the
    prefetch, rounded up to a multiple of ``LP_ALIGN``."""
    return cdiv((cdiv(L, TT) + 1) * TT, LP_ALIGN) * LP_ALIGN


def segments(warps: int, n_chunks: int, target: int, policy: Policy = DEFAULT) -> tuple[int, int]:
    """(NSEG, SEG): ``n_chunks`` checkpoint chunks in NSEG segments of SEG chunks (the last may
    be shorter) when ``warps`` (batch x channel blocks x warps per block) is below
    ``policy.split_below_warps``, aiming at ``target`` warps; (1, n_chunks) otherwise. Note
    [selective scan segments]."""
    if not _concrete(warps, n_chunks):  # a symbolic size: unsplit, no guard on it
        return 1, torch.sym_max(n_chunks, 1)
    if warps >= policy.split_below_warps:
        return 1, max(n_chunks, 1)
    want = max(1, min(n_chunks, -(-target // max(warps, 1))))
    seg = max(1, -(-n_chunks // want))
    return -(-n_chunks // seg) if n_chunks > 0 else 1, max(seg, 1)


def block_channels(batch: int, dim: int, G: int, facts: DeviceFacts) -> tuple[int, int]:
    """(BLOCK_D, num_warps) of the backward's 2-D kernels: one channel per thread; the largest
    block that still gives three programs per multiprocessor, and (grouped B / C) one that never
    straddles two groups."""
    block_d, warps = 32, 1
    for bd, w in ((128, 4), (64, 2)):
        if _concrete(batch, dim) and batch * cdiv(dim, bd) >= 3 * facts.sm_count:
            block_d, warps = bd, w
            break
    if G > 1:
        per_group = dim // G
        limit = per_group & -per_group  # largest power of two dividing it
        if limit < block_d:
            block_d, warps = limit, max(1, limit // 32)
    return block_d, warps


def fwd_block_channels(
    dim: int, G: int, NP: int, per_channel: int | None, policy: Policy = DEFAULT
) -> tuple[int, int]:
    """(BLOCK_D, num_warps) of the forward (and of the backward's lane states pass):
    ``policy.fwd_warps`` warps of ``per_channel`` threads a channel (NP / 4 if None), fewer for
    grouped B / C so that a block never straddles two groups."""
    if per_channel is None:
        per_channel = max(1, min(NP // 4, 32))
    warps = policy.fwd_warps
    block_d = max(1, warps * 32 // per_channel)
    if G > 1:
        per_group = int(dim) // G
        limit = per_group & -per_group
        if limit < block_d:
            block_d = limit
            warps = max(1, min(policy.fwd_warps, block_d * per_channel // 32))
    return block_d, warps


def _per_wave(regs: int, warps: int, facts: DeviceFacts) -> int:
    """Programs of ``warps`` warps at ``regs`` registers a thread one wave holds."""
    return max(1, facts.regs_per_sm // (regs * 32 * warps)) * facts.sm_count


def fill_waves(per_segment: int, nseg: int, warps: int, regs: int, facts: DeviceFacts) -> int:
    """Segments of a split lane forward of ``per_segment`` programs a segment for which
    ``segments`` picks ``nseg``: as many as fill the whole waves that nseg segments' real pass
    starts at ``regs`` registers a thread; nseg where that is one wave or less, or under the
    interpreter."""
    if not facts.compiled:
        return nseg
    per_wave = _per_wave(regs, warps, facts)
    waves = cdiv(per_segment * nseg, per_wave)
    return nseg if waves <= 1 else waves * per_wave // per_segment


def wave_fill(programs: int, regs: int, warps: int, facts: DeviceFacts) -> float:
    """The fraction of its waves' program slots that ``programs`` fill."""
    per_wave = _per_wave(regs, warps, facts)
    return programs / (cdiv(programs, per_wave) * per_wave)


def ch2_rows16(
    programs: int, programs2: int, warps: int, rows16: bool, facts: DeviceFacts,
    policy: Policy = DEFAULT,
) -> tuple[bool, bool]:  # fmt: skip
    """(two channels a thread, 16-bit rows) of an unsplit lane forward whose geometry allows
    both: the two-channel pass (``programs2`` programs) where its waves are as full as the
    one-channel pass's (``programs``), with fp32 rows where they fit, else with 16-bit rows
    (``rows16``: B and C can take them) where those do. Always two channels, fp32 rows, under
    the interpreter. Note [selective scan forward 16-bit rows]."""

    def fills(regs2: int) -> bool:
        if not facts.compiled:
            return True
        one = wave_fill(programs, policy.split_regs, warps, facts)
        return wave_fill(programs2, regs2, warps, facts) >= one

    if fills(policy.ch2_wave_regs):
        return True, False
    if rows16 and fills(policy.ch2_wave_regs16):
        return True, True
    return False, False


# --- the forward ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a plan: which kernel (a name the launcher maps to its kernel),
    its grid, constexprs and launch options (``num_warps``, ``maxnreg``), and the runtime
    ints the planner fixes (segment lengths)."""

    kernel: str
    grid: tuple
    consts: tuple[tuple[str, object], ...]
    ints: tuple[tuple[str, object], ...] = ()

    def kw(self) -> dict:
        return dict(self.consts)

    def args(self) -> dict:
        return dict(self.ints)


@dataclass(frozen=True)
class ForwardPlan:
    """How the forward runs one shape (``plan_forward``).

    ``kernel``: "lane" (Note [selective scan forward lanes]) or "tile" (the 2-D kernel).
    ``local``: the segments' local pass (None: one segment); ``carry``: the 2-D carry pass;
    ``real``: the pass that writes the outputs. ``bc16``: the lane B / C rows' dtype (None:
    fp32). ``a_raw``: the lane kernel reads A as it is. ``direct``: checkpoints written straight
    into the op's output (N = NP). ``records``: segment records of the local pass.
    ``fallback``: the plan to run where a lane kernel fails its layout check. ``ptx``: the
    kernels use inline PTX (``DeviceFacts.ptx``: the shuffles, ``rcp``), else their portable
    ``tl`` code (Triton's interpreter, a GPU without PTX); ``PTX`` in every launch's constexprs.
    """

    kernel: str
    NP: int
    CK: int
    TT: int
    LP: int
    block_d: int
    warps: int
    nseg: int
    seg: int
    direct: bool
    a_raw: bool
    bc16: torch.dtype | None
    records: int
    local: Launch | None
    carry: Launch | None
    real: Launch
    fallback: ForwardPlan | None
    ptx: bool


def _concrete(*xs: object) -> bool:
    return all(type(x) is int for x in xs)


def plan_forward(
    batch: int, dim: int, L: int, N: int, G: int, dtype: torch.dtype, bc_dtypes: tuple,
    a_plain: bool, facts: DeviceFacts, policy: Policy = DEFAULT, ck: int = CHECKPOINT_LEN,
    lane: bool = True,
) -> ForwardPlan:  # fmt: skip
    """The forward's plan.

    Args:
        batch, dim, L, N, G: sizes (``G`` groups of B / C); ints or SymInts.
        dtype: u's dtype (float32, float16 or bfloat16).
        bc_dtypes: (B.dtype, C.dtype).
        a_plain: A is a contiguous float32 tensor.
        facts: the device's ``DeviceFacts``.
        policy: the tuning constants.
        ck: the checkpoint chunk length (``shapes.CHECKPOINT_LEN``).
        lane: plan the lane kernels (False: the 2-D kernel, the fallback).

    Returns:
        A ``ForwardPlan``; cached for concrete sizes.

    Example:
        >>> p = plan_forward(1, 1536, 4096, 16, 1, torch.bfloat16,
        ...                  (torch.bfloat16, torch.bfloat16), True, H200)
        >>> p.kernel, p.nseg, p.real.kernel
        ('lane', 16, 'fwd_lane2')
    """
    if _concrete(batch, dim, L, N, G):
        return _plan_forward_cached(batch, dim, L, N, G, dtype, bc_dtypes, a_plain, facts,
                                    policy, ck, lane)  # fmt: skip
    return _plan_forward(batch, dim, L, N, G, dtype, bc_dtypes, a_plain, facts, policy, ck, lane)


def _plan_forward(batch, dim, L, N, G, dtype, bc_dtypes, a_plain, facts, policy, ck, lane):
    NP = pad_states(N)
    NCK = cdiv(L, ck) + 1
    lane = lane and NP <= policy.lane_max_np
    KL, TPL = lane_geometry(NP)
    TT = KL * TPL if lane else min(NP, 8)
    block_d, warps = fwd_block_channels(dim, G, NP, KL if lane else None, policy)
    LP = padded_steps(L, TT) if lane else L
    nblk = cdiv(dim, block_d)
    nseg, seg = segments(batch * nblk * warps, NCK - 1, facts.sm_count * policy.fwd_warps_per_sm,
                         policy)  # fmt: skip
    seg_t = lane and nseg > 1
    # the real pass with two channels a thread (Note [selective scan forward two channels a
    # thread]): its geometry, a program within one group
    ch2 = lane and policy.two_channels and (KL, TPL) == (4, 2)
    ch2 = ch2 and (G == 1 or (dim // G) % (2 * block_d) == 0)
    rows16 = lane and dtype in (torch.bfloat16, torch.float16) and bc_dtypes == (dtype, dtype)
    rows16 = rows16 and not (dtype == torch.bfloat16 and (NP // KL) % 2)  # bf16 pairs
    if seg_t:  # segments of whole tiles, as many as fill the real pass's waves
        if ch2:
            per = batch * cdiv(dim, 2 * block_d)
            want = fill_waves(per, nseg, warps, policy.ch2_wave_regs, facts)
        else:
            want = fill_waves(batch * nblk, nseg, warps, policy.split_regs, facts)
        seg = cdiv(cdiv(L, TT), want)
        nseg = cdiv(cdiv(L, TT), seg)
    if policy.rows16 == "always":
        pass
    elif ch2 and nseg == 1 and _concrete(batch):
        # unsplit: as its waves fill against the one-channel pass's
        progs, progs2 = batch * nblk, batch * cdiv(dim, 2 * block_d)
        ch2, rows16 = ch2_rows16(progs, progs2, warps, rows16, facts, policy)
    else:
        rows16 = False
    direct = NP == N
    a_raw = lane and direct and dtype != torch.float32 and a_plain
    consts: dict = dict(NP=NP, CK=ck, BLOCK_D=block_d, SPLIT=nseg > 1, PTX=facts.ptx,
                        num_warps=warps)  # fmt: skip
    if lane:
        consts.update(KL=KL, TPL=TPL, A_RAW=a_raw, HAS_LAST=direct, Y_SCATTER=True, AHEAD=1,
                      BC_ROLL=True, BCAST_TILE=dtype != torch.float32, SEG_T=seg_t)  # fmt: skip
        # every tile whole and every program's channels there: the loop without masks
        static = _concrete(batch, dim, L)
        if policy.even and static and L % TT == 0 and nseg == 1 and dim % block_d == 0:
            consts.update(EVEN=True, AHEAD=2)
            if batch * dim * L < 2**31:
                consts["I32"] = True
        if rows16:
            consts["BC16"] = 1 if dtype == torch.bfloat16 else 2
    else:
        consts["TT"] = TT
    # local segments per real one, where they divide the real segments' tiles
    fine = policy.local_fine
    fold = fine if seg_t and fine > 1 and seg % fine == 0 else 1
    if fold > 1:
        consts["FOLD"] = fold
    nloc = (nseg - 1) * fold
    kname = "fwd_lane" if lane else "fwd_tile"
    local = carry = None
    records = nseg * fold
    if nseg > 1:  # Note [selective scan segments]: the local pass (the lane one skips the last)
        local_ints = (("SEG", seg // fold),)
        local = Launch(kname, (nblk, batch, nloc if lane else nseg),
                       tuple({**consts, "LOCAL": True}.items()), local_ints)  # fmt: skip
        if not lane:
            carry = Launch("fwd_carry", (nblk, batch),
                           (("NP", NP), ("BLOCK_D", block_d), ("num_warps", warps)),
                           (("NSEG", nseg), ("SEG", seg)))  # fmt: skip
    if ch2:
        extra = {k: v for k, v in consts.items() if k not in ("Y_SCATTER", "BC_ROLL")}
        extra["FOLD_GROUP"] = policy.fold_group
        if extra.get("EVEN") and dim % (2 * block_d):  # a program's channels: 2 BLOCK_D
            extra.update(EVEN=False, AHEAD=1, I32=False)
        real = Launch("fwd_lane2", (cdiv(dim, 2 * block_d), batch, nseg), tuple(extra.items()),
                      (("SEG", seg),))  # fmt: skip
    else:
        extra = {**consts, "LOCAL": False}
        if lane and nseg > 1 and facts.compiled:  # a register cap past a few waves
            per_sm = facts.regs_per_sm // (policy.split_regs * 32 * warps)
            if batch * nblk * nseg > policy.split_cap_waves * per_sm * facts.sm_count:
                extra["maxnreg"] = policy.split_regs
        real = Launch(kname, (nblk, batch, nseg), tuple(extra.items()), (("SEG", seg),))
    fallback = None
    if lane:
        fallback = _plan_forward(batch, dim, L, N, G, dtype, bc_dtypes, a_plain, facts, policy,
                                 ck, False)  # fmt: skip
    bc16 = (torch.bfloat16 if dtype == torch.bfloat16 else torch.float16) if rows16 else None
    return ForwardPlan(
        kernel="lane" if lane else "tile", NP=NP, CK=ck, TT=TT, LP=LP, block_d=block_d,
        warps=warps, nseg=nseg, seg=seg, direct=direct, a_raw=a_raw, bc16=bc16, records=records,
        local=local, carry=carry, real=real, fallback=fallback, ptx=facts.ptx,
    )  # fmt: skip


_plan_forward_cached = functools.lru_cache(maxsize=1024)(_plan_forward)


# --- the backward -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BackwardPlan:
    """How the backward runs one shape (``plan_backward``).

    ``main``: "lane" (Note [selective scan backward lanes]), "split" (Note [selective scan
    backward split]), "tile_rs" (the 2-D kernel summing dB / dC by a one-warp reduce-scatter,
    32-channel blocks) or "tile" (the 2-D kernel, ``tl.sum``). ``states``: the split path's
    tile-start states, "lane_adj" (the lane states kernel, which also runs the segments' local
    pass), "lane", "split" or None (the 2-D path). ``local``: the segments' local pass, "lane"
    (in the states kernel), "tile" (the 2-D one) or None. ``carry``: "kernel" (a carry pass),
    "main" (the lane main kernel folds the segments itself) or None. ``fallback``: the plan to
    run where a lane kernel fails its layout check. ``ptx``: the kernels use inline PTX
    (``DeviceFacts.ptx``: the shuffles, ``rcp``, the L1 prefetch), else their portable ``tl``
    code; ``emulate`` (its negation): the reduce-scatters' shuffles by ``tl.gather``.
    """

    main: str
    states: str | None
    local: str | None
    carry: str | None
    NP: int
    CK: int
    block_d: int
    warps: int
    nseg: int
    seg: int
    tile_block: tuple[int, int]
    states_block: tuple[int, int]
    LP: int
    emulate: bool
    prefetch_bc: bool
    finish_block: int
    sum_unroll: int
    states_maxnreg: int
    fallback: BackwardPlan | None
    ptx: bool


def split_applies(N: int, dim: int, G: int, static_len: bool, L: int, aligned: bool,
                  facts: DeviceFacts) -> bool:  # fmt: skip
    """Whether the split (and lane) backward takes a call: 16 states (N 9..16, padded), groups
    of channels in whole blocks of 8; compiled, also the facts under which the layouts its
    reduce-scatter relies on were checked (``tests/ops/selective_scan/split_layout_check.py``):
    L a multiple of 16 known to Triton (static, not a symbolic size) and every tensor 16-byte
    aligned. The interpreter emulates the shuffles, so there any L."""
    if pad_states(N) != 16 or (dim // G) % SPLIT_BLOCK_D != 0:
        return False
    if not facts.compiled:
        return True
    return static_len and L % 16 == 0 and aligned


def plan_backward(
    batch: int, dim: int, L: int, N: int, G: int, static_len: bool, aligned: bool,
    facts: DeviceFacts, traced: bool = False, policy: Policy = DEFAULT,
    ck: int = CHECKPOINT_LEN, lane: bool = True,
) -> BackwardPlan:  # fmt: skip
    """The backward's plan.

    Args:
        batch, dim, L, N, G: sizes; ints or SymInts.
        static_len: L is a concrete int (not a symbolic size under ``torch.compile``).
        aligned: every tensor the main kernel reads or writes is 16-byte aligned.
        facts: the device's ``DeviceFacts``.
        traced: the launch is traced (``wrap_triton``): no L1 prefetch asm.
        policy: the tuning constants.
        ck: the checkpoint chunk length (``shapes.CHECKPOINT_LEN``).
        lane: plan the lane kernels (False: their fallbacks).

    Returns:
        A ``BackwardPlan``; cached for concrete sizes.

    Example:
        >>> plan_backward(8, 4096, 2047, 16, 1, True, True, H200).main
        'tile_rs'
    """
    if _concrete(batch, dim, L, N, G):
        return _plan_backward_cached(batch, dim, L, N, G, static_len, aligned, facts, traced,
                                     policy, ck, lane)  # fmt: skip
    return _plan_backward(batch, dim, L, N, G, static_len, aligned, facts, traced, policy, ck,
                          lane)  # fmt: skip


def _plan_backward(batch, dim, L, N, G, static_len, aligned, facts, traced, policy, ck, lane):
    NP = pad_states(N)
    NCK = cdiv(L, ck) + 1
    split = split_applies(N, dim, G, static_len, L, aligned, facts)
    # the 2-D kernels' block: 32 channels in one warp for the reduce-scatter where the groups
    # allow (its shuffles emulated under the interpreter)
    rs = NP <= policy.rs_max_np and not split and (G == 1 or (dim // G) % 32 == 0)
    tile_block = (32, 1) if rs else block_channels(batch, dim, G, facts)
    KL, TPL = lane_geometry(NP)
    lane = lane and split and KL * TPL == SPLIT_TT
    if split:  # the forward's density: 8 channels a warp, so the forward's target
        target = facts.sm_count * policy.fwd_warps_per_sm
        nseg, seg = segments(batch * cdiv(dim, SPLIT_BLOCK_D), NCK - 1, target, policy)
        block_d, warps = SPLIT_BLOCK_D, 1
        main = "lane" if lane else "split"
        states = ("lane_adj" if nseg > 1 else "lane") if lane else "split"
        local = ("lane" if lane else "tile") if nseg > 1 else None
    else:
        bd, w = tile_block
        nseg, seg = segments(batch * cdiv(dim, bd) * w, NCK - 1,
                             facts.sm_count * policy.warps_per_sm, policy)  # fmt: skip
        block_d, warps = tile_block
        main = "tile_rs" if rs else "tile"
        states = None
        local = "tile" if nseg > 1 else None
    carry = None
    if nseg > 1:
        carry = "main" if lane and nseg <= policy.fold_max_segments else "kernel"
    states_block = fwd_block_channels(dim, G, NP, KL if lane else None, policy)
    fallback = None
    if lane:
        fallback = _plan_backward(batch, dim, L, N, G, static_len, aligned, facts, traced, policy,
                                  ck, False)  # fmt: skip
    return BackwardPlan(
        main=main, states=states, local=local, carry=carry, NP=NP, CK=ck, block_d=block_d,
        warps=warps, nseg=nseg, seg=seg, tile_block=tile_block, states_block=states_block,
        LP=padded_steps(L, SPLIT_TT), emulate=not facts.ptx, prefetch_bc=not traced,
        finish_block=max(1, policy.sum_values // NP), sum_unroll=policy.sum_unroll,
        states_maxnreg=policy.states_maxnreg, fallback=fallback, ptx=facts.ptx,
    )  # fmt: skip


_plan_backward_cached = functools.lru_cache(maxsize=1024)(_plan_backward)


def replace(plan: ForwardPlan | BackwardPlan, **changes: object) -> ForwardPlan | BackwardPlan:
    """``dataclasses.replace``: an experiment's variation of a planned plan."""
    return dataclasses.replace(plan, **changes)  # type: ignore[arg-type]  # (fields vary by name)


__all__ = [
    "H200",
    "INTERPRETED",
    "BackwardPlan",
    "DeviceFacts",
    "ForwardPlan",
    "Launch",
    "Policy",
    "device_facts",
    "plan_backward",
    "plan_forward",
]
