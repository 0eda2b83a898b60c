"""Run the Triton kernels under Triton's CPU interpreter when no GPU is present (all test folders).

TRITON_INTERPRET must be set before a ``@triton.jit`` function is defined (decoration time), so
it is set here, at collection, before the test modules import the kernel modules. On a machine
with CUDA the variable is left alone: the ``gpu`` tests need compiled kernels.

Also a shim for Triton's interpreter (3.6, 3.7) under NumPy >= 2.4: the interpreter keeps scalars as
1-element 1-D arrays and converts them with ``int(array)`` when a kernel loops over a runtime
integer (``for i in range(0, n)``), which NumPy 2.4 made an error ("only 0-dimensional arrays can
be converted to Python scalars"); ``tensor.__index__`` is re-installed with ``.item()``.
"""

import os

import torch


def _patch_interpreter_for_numpy2() -> None:
    try:
        from triton.runtime import interpreter
    except ImportError:  # no triton: the triton tests skip themselves
        return
    if getattr(interpreter, "_ssmscan_index_patched", False):
        return
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:  # an interpreter without the hook (not 3.6 / 3.7): nothing to patch
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    interpreter._patch_lang_tensor = patched
    interpreter._ssmscan_index_patched = True


if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    _patch_interpreter_for_numpy2()
