"""Argument checks shared by the ops: every error names the argument, what it got and what was
expected. Nothing is broadcast, cast or truncated silently."""

from __future__ import annotations

from collections.abc import Sequence

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def describe(t: torch.Tensor) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}"


def check_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def check_ndim(name: str, t: torch.Tensor, ndims: Sequence[int], meaning: str) -> None:
    if t.dim() not in ndims:
        raise ValueError(f"{name} must be {meaning}; got {describe(t)}")


def check_shape(
    name: str, t: torch.Tensor, expected: Sequence[int | torch.SymInt], meaning: str
) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)} {meaning}; got {describe(t)}")


def check_dtype(name: str, t: torch.Tensor, allowed: Sequence[torch.dtype], why: str = "") -> None:
    if t.dtype not in allowed:
        names = ", ".join(str(d) for d in allowed)
        suffix = f" ({why})" if why else ""
        raise TypeError(f"{name} must have dtype in [{names}]{suffix}; got {describe(t)}")


def check_same_device(named: Sequence[tuple[str, torch.Tensor | None]]) -> None:
    first_name, first = named[0]
    assert first is not None
    for name, t in named[1:]:
        if t is not None and t.device != first.device:
            raise ValueError(
                f"{name} is on device {t.device} but {first_name} is on {first.device}; "
                f"all tensors must be on one device ({name}: {describe(t)})"
            )
