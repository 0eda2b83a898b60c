"""Argument checks shared by the ops: every error names the argument, what it got and what was
expected. Nothing is broadcast, cast or truncated silently."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class Described(Protocol):
    """What the checks read of a tensor: a ``torch.Tensor`` or its ``Layout``."""

    @property
    def shape(self) -> torch.Size: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def device(self) -> torch.device: ...

    def dim(self) -> int: ...


class Layout(NamedTuple):
    """A tensor's shape, dtype and device: all that shape, dtype and device checks read, and
    hashable (where the sizes are ints), so a check of layouts can be cached."""

    shape: torch.Size
    dtype: torch.dtype
    device: torch.device

    def dim(self) -> int:
        return len(self.shape)


def describe(t: Described) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}"


def check_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def check_ndim(name: str, t: Described, ndims: Sequence[int], meaning: str) -> None:
    if t.dim() not in ndims:
        raise ValueError(f"{name} must be {meaning}; got {describe(t)}")


def check_shape(
    name: str, t: Described, expected: Sequence[int | torch.SymInt], meaning: str
) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)} {meaning}; got {describe(t)}")


def check_dtype(name: str, t: Described, allowed: Sequence[torch.dtype], why: str = "") -> None:
    if t.dtype not in allowed:
        names = ", ".join(str(d) for d in allowed)
        suffix = f" ({why})" if why else ""
        raise TypeError(f"{name} must have dtype in [{names}]{suffix}; got {describe(t)}")


def check_same_device(named: Sequence[tuple[str, Described | None]]) -> None:
    first_name, first = named[0]
    assert first is not None
    for name, t in named[1:]:
        if t is not None and t.device != first.device:
            raise ValueError(
                f"{name} is on device {t.device} but {first_name} is on {first.device}; "
                f"all tensors must be on one device ({name}: {describe(t)})"
            )
