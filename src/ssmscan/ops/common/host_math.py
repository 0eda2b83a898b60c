"""Integer helpers for the launchers' host code.

``triton.cdiv`` and ``triton.next_power_of_2`` are ``ConstexprFunction``s in Triton 3.6: every
host call unwraps its arguments through Python-level comprehensions (~2-4 us each on the H200
machine's host), and a backward called them ~14 times; host time is what bounds batch-1 eager
calls. These compute the same values with plain arithmetic (``cdiv`` also on SymInts, as
``triton.cdiv`` does: the same expression)."""

from __future__ import annotations

from typing import Any


def cdiv(x: Any, y: Any) -> Any:
    """ceil(x / y) for positive y, as ``triton.cdiv``."""
    return (x + y - 1) // y


def next_pow2(n: Any) -> Any:
    """The smallest power of two >= n (n >= 1), as ``triton.next_power_of_2``; SymInts go to
    Triton's own."""
    if type(n) is int and n >= 1:
        return 1 << (n - 1).bit_length()
    import triton

    return triton.next_power_of_2(n)
