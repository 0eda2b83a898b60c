"""A shim for Triton's CPU interpreter (3.6, 3.7) under NumPy >= 2.4.

The interpreter keeps scalars as 1-element 1-D arrays and converts them with ``int(array)`` when a
kernel loops over a runtime integer (``for i in range(0, n)``), which NumPy 2.4 made an error
("only 0-dimensional arrays can be converted to Python scalars"). ``tensor.__index__`` is
re-installed with ``.item()``. The tests' conftest and the benchmarks' interpreter checks call it;
it patches Triton's interpreter module once and does nothing without the hook it wraps.
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
