"""How the Triton launchers launch: a frozen value passed in, not module state.

What a call launches (kernels, blocks, segments) is its plan's (``selective_scan.plan``); how the
launches reach the GPU is ``LaunchOptions``: the eager compiled-kernel cache (Note [eager launch
cache] in ``triton_launch``), recorded launch plans (Note [eager launch plans] in
``launch_plan``) and the layout checks of traced launches (Note [traced layout checks] in
``triton_launch``). The defaults are the library's behaviour; a test or a host-time benchmark
passes other options to the call it measures (``triton_fwd.forward(..., options=...)``,
``launcher(kernel, check, options)``), and nothing is switched for the process.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchOptions:
    """How a launcher launches.

    Args:
        cache: eager CUDA launches go through the launcher's cache of compiled kernels straight
            to Triton's compiled launcher (False: every launch through ``JITFunction.run``).
        replay: an eager call of a ``launch_plan.planned`` function records its launches and
            replays them on later calls with the same signature (needs ``cache``; False: every
            call runs the function).
        check_traced: a launch traced for ``torch.compile`` / export whose kernel has a layout
            check compiles the kernel for the current GPU and checks it first (False: traced
            launches are not checked; eager launches always are).

    Example:
        >>> LaunchOptions().cache, LaunchOptions(replay=False).replay
        (True, False)
    """

    cache: bool = True
    replay: bool = True
    check_traced: bool = True

    def __post_init__(self) -> None:  # the hash once: options are part of every plan's key
        object.__setattr__(self, "_hash", hash((self.cache, self.replay, self.check_traced)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]


DEFAULT = LaunchOptions()
