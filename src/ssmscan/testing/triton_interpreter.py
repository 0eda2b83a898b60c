"""A shim for Triton's CPU interpreter (3.6, 3.7) under NumPy >= 2.4.

The interpreter keeps scalars as 1-element 1-D arrays and converts them with ``int(array)`` when a
kernel loops over a runtime integer (``for i in range(0, n)``), which NumPy 2.4 made an error
("only 0-dimensional arrays can be converted to Python scalars"). ``tensor.__index__`` is
re-installed with ``.item()``. The tests' conftest and the benchmarks' interpreter checks call it;
it patches Triton's interpreter module once and does nothing without the hook it wraps.

``patch_for_autotuned_kernels_on_cpu`` adds what another library's autotuned Triton kernels
(mamba-ssm's) need to run on CPU tensors under the interpreter, for benchmarks' CPU smoke runs.
"""

from __future__ import annotations


def patch_triton_interpreter_for_numpy2() -> None:
    """Make Triton's interpreter index with ``.item()`` (idempotent; a no-op without Triton or on
    an interpreter without ``_patch_lang_tensor``)."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    if getattr(interpreter, "_ssmscan_index_patched", False):
        return
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    interpreter._patch_lang_tensor = patched
    interpreter._ssmscan_index_patched = True


def patch_for_autotuned_kernels_on_cpu() -> None:
    """The NumPy 2 shim, every ``triton.autotune`` keeping its first config only (the interpreter
    has no benchmarker) and ``torch.cuda.device`` a no-op context (callers wrap launches in it).
    For this process: benchmarks' CPU smoke runs of other libraries' kernels, never the library."""
    import contextlib

    import torch
    import triton.runtime.autotuner as autotuner

    patch_triton_interpreter_for_numpy2()
    if getattr(autotuner.Autotuner, "_ssmscan_one_config", False):
        return
    init = autotuner.Autotuner.__init__

    def one_config(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.configs = self.configs[:1]

    autotuner.Autotuner.__init__ = one_config
    autotuner.Autotuner._ssmscan_one_config = True
    setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())  # noqa: B010
