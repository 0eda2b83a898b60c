"""Peak memory of one step on the CPU, from the profiler's allocation events (shared by the
tests and the benchmarks)."""

from __future__ import annotations

from collections.abc import Callable


def cpu_peak_bytes(step: Callable[[], object]) -> int:
    """Most bytes held at once by tensors allocated during ``step()`` (its temporaries and
    results; tensors that exist before the call are not counted), from the profiler's
    allocation events. An exact count, independent of timing.

    Example:
        >>> import torch
        >>> cpu_peak_bytes(lambda: torch.ones(1024)) >= 4096
        True
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    held = peak = 0
    for e in events:
        held += e.nbytes()
        peak = max(peak, held)
    return peak
