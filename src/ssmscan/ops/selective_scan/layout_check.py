"""The lane kernels' layout checks: their shuffles assume thread layouts that Triton derives
for their shapes but does not promise, so every kernel the launcher compiles is read back
(its TTGIR) before its first launch; a ``LaneLayoutError`` sends that call to its plan's
fallback (Note [selective scan forward lanes], Note [selective scan backward lanes])."""

from __future__ import annotations

import functools
import re
from typing import Any

import triton

_SHFL = re.compile(
    r'tt\.elementwise_inline_asm "shfl\.sync\.idx[^"]*".*?'
    r": tensor<(\d+)x(\d+)xi32, (#ttg\.slice<\{[^}]*\}>|#\w+)>"
)
# ... and the butterflies (the forward's ``_y_scatter``; the backward's lane kernels shuffle rows
# with them, so their check reads ``shfl.sync.idx`` only)
_SHFL_BFLY = re.compile(
    r'tt\.elementwise_inline_asm "shfl\.sync\.(?:idx|bfly)[^"]*".*?'
    r": tensor<(\d+)x(\d+)xi32, (#ttg\.slice<\{[^}]*\}>|#\w+)>"
)
_ALIAS = re.compile(r"^(#\w+) = (#ttg\.\w+<\{.*\}>)", re.M)


def _ints(spec: str, field: str) -> list[int]:
    m = re.search(field + r" = \[([\d, ]*)\]", spec)
    return [int(x) for x in m.group(1).split(",")] if m else []


def _bases(enc: str, aliases: dict[str, str]) -> dict[str, list[tuple[int, ...]]]:
    """Register / lane / warp bases (the offset each bit adds, per dimension) of a blocked,
    linear or slice layout in TTGIR text; KeyError / ValueError for anything else."""
    enc = aliases.get(enc, enc)
    if enc.startswith("#ttg.slice"):
        m_dim = re.search(r"dim = (\d+)", enc)
        m_parent = re.search(r"parent = (#[\w.]+(?:<\{.*\}>)?)", enc)
        if m_dim is None or m_parent is None:
            raise ValueError(enc)
        dim = int(m_dim.group(1))
        parent = _bases(m_parent.group(1), aliases)
        return {k: [b[:dim] + b[dim + 1 :] for b in v] for k, v in parent.items()}
    if enc.startswith("#ttg.linear"):
        out = {}
        for kind in ("register", "lane", "warp"):
            m = re.search(kind + r" = \[(.*?)\](?:, \w+ = |\}>)", enc)
            vecs = re.findall(r"\[([\d, ]+)\]", m.group(1)) if m else []
            out[kind] = [tuple(int(x) for x in v.split(",")) for v in vecs]
        return out
    if not enc.startswith("#ttg.blocked"):
        raise ValueError(enc)
    spt, tpw, wpc, order = (
        _ints(enc, f) for f in ("sizePerThread", "threadsPerWarp", "warpsPerCTA", "order")
    )
    rank = len(order)

    def unit(d: int, v: int) -> tuple[int, ...]:
        return tuple(v if i == d else 0 for i in range(rank))

    out = {"register": [], "lane": [], "warp": []}
    for d in order:  # fastest dimension first
        out["register"] += [unit(d, 1 << k) for k in range(spt[d].bit_length() - 1)]
        out["lane"] += [unit(d, spt[d] << k) for k in range(tpw[d].bit_length() - 1)]
        out["warp"] += [unit(d, spt[d] * tpw[d] << k) for k in range(wpc[d].bit_length() - 1)]
    return out


def lane_layout_problem(ttgir: str, KL: int, bfly: bool = False) -> str | None:
    """What breaks the shuffles' layout assumption (Note [selective scan forward lanes]) in a
    compiled lane kernel's TTGIR, or None when the operand of every ``shfl.sync.idx`` (and
    ``shfl.sync.bfly`` with ``bfly``), a (BLOCK_D, KL) tensor, has its column k on lane bits 0
    .. log2(KL) - 1 and on nothing else (blocked, linear or slice layouts; a layout the check
    cannot read is a problem)."""
    if KL == 1:
        return None
    aliases = dict(_ALIAS.findall(ttgir))
    found = (_SHFL_BFLY if bfly else _SHFL).findall(ttgir)
    if not found:
        return "no shfl.sync.idx in the TTGIR"
    bits = KL.bit_length() - 1
    for _rows, cols, enc in set(found):
        try:
            b = _bases(enc, aliases)
        except (KeyError, ValueError, AttributeError):
            return f"a shuffle operand has a layout the check cannot read: {enc}"
        low = b["lane"][:bits]
        rest = b["lane"][bits:] + b["register"] + b["warp"]
        if int(cols) != KL or low != [(0, 1 << i) for i in range(bits)] or any(v[1] for v in rest):
            return (
                f"a shuffle operand ({cols} columns, KL = {KL}) has layout {aliases.get(enc, enc)}"
            )
    return None


class LaneLayoutError(RuntimeError):
    """The compiler laid the lane kernel out differently from what its shuffles assume."""


@functools.cache
def check_lane_layout(KL: int, bfly: bool = False) -> Any:
    """A ``launcher`` check: raise ``LaneLayoutError`` on ``lane_layout_problem`` (one per KL and
    ``bfly``, so that ``launcher`` keeps one launcher per kernel and check)."""

    def check(compiled: Any) -> None:
        problem = lane_layout_problem(compiled.asm["ttgir"], KL, bfly)
        if problem is not None:
            raise LaneLayoutError(
                f"ssmscan's lane forward kernel compiled (Triton {triton.__version__}) to a layout "
                f"its lane shuffles cannot use: {problem}"
            )

    return check


_BFLY = re.compile(
    r'tt\.elementwise_inline_asm "shfl\.sync\.bfly[^"]*".*?'
    r": tensor<([\dx]+)xi32, (#ttg\.slice<\{[^}]*\}>|#\w+)>"
)


def _unit(rank: int, d: int, v: int) -> tuple[int, ...]:
    return tuple(v if i == d else 0 for i in range(rank))


def bfly_layout_problem(ttgir: str) -> str | None:
    """What breaks ``_rs8l``'s layout assumption in the compiled TTGIR, or None when every
    ``shfl.sync.bfly`` operand ((8, 4) or (8, 4, 2)) has lane bits 0-1 on k (dimension 1) and
    2-4 on the channel (dimension 0), and nothing else of those dimensions in registers or
    warps."""
    aliases = dict(_ALIAS.findall(ttgir))
    found = _BFLY.findall(ttgir)
    if not found:
        return "no shfl.sync.bfly in the TTGIR"
    for shape, enc in set(found):
        rank = len(shape.split("x"))
        try:
            b = _bases(enc, aliases)
        except (KeyError, ValueError, AttributeError):
            return f"a butterfly operand has a layout the check cannot read: {enc}"

        want = [_unit(rank, 1, 1), _unit(rank, 1, 2)] + [_unit(rank, 0, v) for v in (1, 2, 4)]
        rest = b["register"] + b["warp"]
        if b["lane"] != want or any(v[0] or v[1] for v in rest):
            return f"a butterfly operand ({shape}) has layout {aliases.get(enc, enc)}"
    return None


@functools.cache
def check_bwd_lane_layout() -> Any:
    """A ``launcher`` check for the lane backward: both shuffles' layouts."""

    def check(compiled: Any) -> None:
        ttgir = compiled.asm["ttgir"]
        problem = lane_layout_problem(ttgir, 4) or bfly_layout_problem(ttgir)
        if problem is not None:
            raise LaneLayoutError(
                f"ssmscan's lane backward kernel compiled (Triton {triton.__version__}) to a "
                f"layout its shuffles cannot use: {problem}"
            )

    return check
