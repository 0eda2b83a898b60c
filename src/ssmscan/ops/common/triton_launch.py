"""Launching Triton kernels through ``torch.library.wrap_triton`` without ``None`` pointers.

Note [no None pointers]: our kernels take optional tensors (D, z, delta_bias, initial state,
segment scratch) guarded by constexpr flags (``HAS_D``, ``LOCAL``, ...). Triton accepts ``None``
for such a pointer and specializes it away, but that path is the least exercised one in
Inductor's and AOTInductor's launch code for user-defined kernels (the C++ launcher has to drop
the argument exactly as Triton's specialization did). ``launcher(kernel)[grid](...)`` passes a small
placeholder tensor instead of every ``None``; the constexpr flags guarantee it is never read or
written, so results are the same and the kernel signature is the same on every path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class _Launcher:
    def __init__(self, kernel: Any) -> None:
        self._kernel = torch.library.wrap_triton(kernel)

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., Any]:
        launch = self._kernel[grid]

        def call(*args: Any, **kwargs: Any) -> Any:
            values = (*args, *kwargs.values())
            if any(v is None for v in values):
                like = next(v for v in values if isinstance(v, torch.Tensor))
                dummy = torch.empty(16, dtype=torch.float32, device=like.device)
                args = tuple(dummy if a is None else a for a in args)
                kwargs = {k: dummy if v is None else v for k, v in kwargs.items()}
            return launch(*args, **kwargs)

        return call


def launcher(kernel: Any) -> _Launcher:
    """``launcher(kernel)[grid](*args, **kwargs)``: ``wrap_triton`` with ``None`` tensors replaced
    by a placeholder (Note [no None pointers])."""
    return _Launcher(kernel)
