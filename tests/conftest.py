"""Run the Triton kernels under Triton's CPU interpreter when no GPU is present (all test folders).

TRITON_INTERPRET must be set before a ``@triton.jit`` function is defined (decoration time), so
it is set here, at collection, before the test modules import the kernel modules. On a machine
with CUDA the variable is left alone: the ``gpu`` tests need compiled kernels.

Also the shim for Triton's interpreter under NumPy >= 2.4
(``ssmscan.testing.triton_interpreter``).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # imported after the variable is set: importing ssmscan may define kernels
    from ssmscan.testing.triton_interpreter import patch_triton_interpreter_for_numpy2

    patch_triton_interpreter_for_numpy2()
