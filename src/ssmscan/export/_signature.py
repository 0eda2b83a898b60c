"""The signature of an exported artifact: named inputs and outputs with their dtypes, shapes
(symbolic dimensions by name, with their ranges) and the value range of token ids; it describes
the artifact and checks inputs before they reach it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of an exported artifact.

    Attributes:
        name: the name (the ONNX graph's input/output name).
        dtype: the dtype.
        shape: one entry per dimension: an ``int`` (static) or the name of a dynamic dimension
            (an expression of names for derived sizes, e.g. ``"2*seq_len"``).
        value_range: ``(low, high)`` for token ids: every value must lie in ``[low, high)``.
    """

    name: str
    dtype: torch.dtype
    shape: tuple[int | str, ...]
    value_range: tuple[int, int] | None = None

    def describe(self) -> str:
        """``name: dtype[d0, d1, ...]`` plus the value range, e.g. ``input_ids: int64[batch,
        seq_len] in [0, 256)``."""
        return f"{self.name}: {self.expected()}"

    def expected(self) -> str:
        """``dtype[d0, d1, ...]`` plus the value range."""
        dims = ", ".join(str(d) for d in self.shape)
        text = f"{str(self.dtype).removeprefix('torch.')}[{dims}]"
        if self.value_range is not None:
            text += f" in [{self.value_range[0]}, {self.value_range[1]})"
        return text


@dataclass(frozen=True)
class Signature:
    """Inputs, outputs and dynamic dimensions of an exported artifact.

    Attributes:
        inputs: the flat inputs, in the order the artifact takes them.
        outputs: the flat outputs, in the order the artifact returns them.
        dims: each dynamic dimension's name -> ``(min, max)`` (``max`` ``None``: unbounded).
        device: the device type the artifact runs on (``"cpu"``, ``"cuda"``).

    Example:
        >>> import torch
        >>> sig = Signature(
        ...     (TensorSpec("input_ids", torch.int64, ("batch", "seq_len"), (0, 256)),),
        ...     (TensorSpec("logits", torch.float32, ("batch", "seq_len", 256)),),
        ...     {"batch": (1, None), "seq_len": (2, 65536)},
        ... )
        >>> print(sig.describe())
        inputs:  input_ids: int64[batch, seq_len] in [0, 256)
        outputs: logits: float32[batch, seq_len, 256]
        dims:    batch >= 1, seq_len in [2, 65536]
        >>> sig.check((torch.tensor([[1, 300]]),))
        Traceback (most recent call last):
        ...
        ValueError: input_ids holds token ids in [0, 256); got values from 1 to 300 (shape (1, 2), int64)
    """

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    dims: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    device: str = "cpu"

    @property
    def input_names(self) -> list[str]:
        """The input names, in order."""
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """The output names, in order."""
        return [s.name for s in self.outputs]

    def describe(self) -> str:
        """Three lines: inputs, outputs and the ranges of the dynamic dimensions."""

        def rng(name: str, lo: int, hi: int | None) -> str:
            return f"{name} >= {lo}" if hi is None else f"{name} in [{lo}, {hi}]"

        dims = ", ".join(rng(n, lo, hi) for n, (lo, hi) in self.dims.items()) or "none (static)"
        return (
            f"inputs:  {', '.join(s.describe() for s in self.inputs)}\n"
            f"outputs: {', '.join(s.describe() for s in self.outputs)}\n"
            f"dims:    {dims}"
        )

    def check(self, inputs: Sequence[Any]) -> list[torch.Tensor]:
        """Check ``inputs`` against the signature and return them flat (tensor leaves).

        Raises:
            TypeError: a leaf is not a tensor, or has another dtype.
            ValueError: another number of inputs, another rank, a static size that differs, a
                dynamic size out of its range or inconsistent between inputs, another device, or
                token ids outside their range.
        """
        flat = pytree.tree_leaves(tuple(inputs))
        if len(flat) != len(self.inputs):
            raise ValueError(
                f"the artifact takes {len(self.inputs)} input(s) "
                f"({', '.join(self.input_names)}); got {len(flat)}"
            )
        seen: dict[str, tuple[int, str]] = {}
        for spec, x in zip(self.inputs, flat, strict=True):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{spec.name} must be a tensor; got {type(x).__name__}")
            got = f"shape {tuple(x.shape)}, {str(x.dtype).removeprefix('torch.')}"
            if x.dtype != spec.dtype:
                raise TypeError(f"{spec.name}: expected {spec.expected()}; got {got}")
            if x.device.type != self.device:
                raise ValueError(
                    f"{spec.name} must be on {self.device} (where the artifact runs); got "
                    f"{x.device} ({got})"
                )
            if x.dim() != len(spec.shape):
                raise ValueError(f"{spec.name}: expected {spec.expected()}; got {got}")
            for i, (want, size) in enumerate(zip(spec.shape, x.shape, strict=True)):
                self._check_dim(spec, i, want, int(size), got, seen)
            if spec.value_range is not None and x.numel() > 0:
                lo, hi = int(x.min()), int(x.max())
                if lo < spec.value_range[0] or hi >= spec.value_range[1]:
                    raise ValueError(
                        f"{spec.name} holds token ids in [{spec.value_range[0]}, "
                        f"{spec.value_range[1]}); got values from {lo} to {hi} ({got})"
                    )
        return flat

    def _check_dim(
        self,
        spec: TensorSpec,
        i: int,
        want: int | str,
        size: int,
        got: str,
        seen: dict[str, tuple[int, str]],
    ) -> None:
        if isinstance(want, int):
            if size != want:
                raise ValueError(
                    f"{spec.name}: expected {spec.expected()}, dimension {i} fixed at {want}; "
                    f"got {got}"
                )
            return
        if want not in self.dims:  # a derived size: the named dimensions already pin it
            return
        lo, hi = self.dims[want]
        if size < lo or (hi is not None and size > hi):
            bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise ValueError(
                f"{spec.name}: expected {spec.expected()} with {want} (dimension {i}) {bound}; "
                f"got {got}"
            )
        if want in seen and seen[want][0] != size:
            raise ValueError(
                f"{spec.name}: expected {spec.expected()} with {want} = {seen[want][0]} (as in "
                f"{seen[want][1]}); got {got}"
            )
        seen.setdefault(want, (size, spec.name))
