"""What the kernels' planners need to know of a device, read from the device itself.

``DeviceFacts`` is a small frozen value passed into the planners (``ssmscan.ops.selective_scan.plan``,
the linear scan's block choice): multiprocessors, registers per multiprocessor, compute
capability, and whether kernels are compiled for it or run by Triton's CPU interpreter. Tests pass
fake facts (``H200``); nothing here is a module setting.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DeviceFacts:
    """What the planner needs to know of the device.

    Args:
        sm_count: multiprocessors.
        regs_per_sm: 32-bit registers per multiprocessor.
        capability: compute capability (major, minor); (0, 0) for the interpreter.
        compiled: kernels are compiled for the device (False: Triton's CPU interpreter).

    Example:
        >>> DeviceFacts(132, 65536, (9, 0), True).ptx
        True
    """

    sm_count: int
    regs_per_sm: int
    capability: tuple[int, int]
    compiled: bool

    def __post_init__(self) -> None:  # the hash once: the facts are part of every plan's key
        key = (self.sm_count, self.regs_per_sm, self.capability, self.compiled)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    @property
    def ptx(self) -> bool:
        """The kernels' inline PTX can run: compiled for compute capability 7.0 or later. What
        the kernels' PTX needs is ``shfl.sync.idx`` / ``shfl.sync.bfly`` with a full-warp mask
        (the ``.sync`` forms that independent thread scheduling, sm_70, requires), ``%laneid``,
        ``rcp.approx.ftz.f32`` and ``prefetch.global.L1``: all in every PTX ISA that sm_70 and
        later take; nothing of sm_80 or sm_90. The planners put this in every plan (``PTX``);
        without it the kernels run their portable ``tl`` code.

        Example:
            >>> DeviceFacts(80, 65536, (6, 1), True).ptx, INTERPRETED.ptx
            (False, False)
        """
        return self.compiled and self.capability >= (7, 0)


H200 = DeviceFacts(sm_count=132, regs_per_sm=65536, capability=(9, 0), compiled=True)
INTERPRETED = DeviceFacts(sm_count=132, regs_per_sm=65536, capability=(0, 0), compiled=False)


@functools.cache
def _cuda_facts(index: int, interpreted: bool) -> DeviceFacts:
    props = torch.cuda.get_device_properties(index)
    regs = getattr(props, "regs_per_multiprocessor", None)
    if regs is None:
        from triton.runtime.driver import driver

        regs = driver.active.utils.get_device_properties(index)["max_num_regs"]
    return DeviceFacts(
        props.multi_processor_count, int(regs), (props.major, props.minor), not interpreted
    )


def device_facts(device: torch.device) -> DeviceFacts:
    """The facts of ``device``: a CUDA device's own (cached per device; not ``compiled`` while
    Triton's interpreter is on, ``TRITON_INTERPRET=1``, which runs CUDA tensors' kernels too),
    ``INTERPRETED`` for any other (the interpreter runs the kernels on CPU tensors).

    Example:
        >>> device_facts(torch.device("cpu")) == INTERPRETED
        True
    """
    if device.type != "cuda":
        return INTERPRETED
    index = device.index if device.index is not None else torch.cuda.current_device()
    from triton import knobs

    return _cuda_facts(index, bool(knobs.runtime.interpret))
