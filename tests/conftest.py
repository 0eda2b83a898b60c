"""Run the Triton kernels under Triton's CPU interpreter when no GPU is present (all test folders).

TRITON_INTERPRET must be set before a ``@triton.jit`` function is defined (decoration time), so
it is set here, at collection, before the test modules import the kernel modules. On a machine
with CUDA the variable is left alone: the ``gpu`` tests need compiled kernels.

Also the shim for Triton's interpreter under NumPy >= 2.4
(``ssmscan.testing.triton_interpreter``), the ``torch_tensorrt`` fixture of the TensorRT tests,
and, on a GPU, the caching allocator's memory handed back after each ``gpu`` test: the GPU suite
runs in a dozen worker processes on one device (``benchmarks/device.sh tests``), and a worker
that kept the float64 reference's tens of GB reserved after its test made the next large test
in another worker run out of memory.
"""

import os
import pathlib

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # imported after the variable is set: importing ssmscan may define kernels
    from ssmscan.testing.triton_interpreter import patch_triton_interpreter_for_numpy2

    patch_triton_interpreter_for_numpy2()


@pytest.fixture(autouse=True)
def _release_gpu_memory(request):
    """After a ``gpu`` test, its worker returns the memory its caching allocator holds."""
    yield
    if request.node.get_closest_marker("gpu") is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


SHIM = pathlib.Path(__file__).parents[1] / "tools" / "trt_shim.py"


@pytest.fixture(scope="module")
def torch_tensorrt():
    """torch_tensorrt as installed; through tools/trt_shim.py where TensorRT's libraries are absent."""
    try:
        import torch_tensorrt as trt

        return trt
    except ImportError as e:
        pytest.skip(f"torch-tensorrt is not installed ({e}); pip install 'ssmscan[tensorrt]'")
    except Exception:  # a bare Exception when libnvinfer is missing: use the stand-in
        pass
    from ssmscan.testing.scripts import load_script

    shim = load_script(SHIM, "trt_shim")
    try:
        return shim.import_torch_tensorrt()
    except Exception as e:
        pytest.skip(f"torch-tensorrt does not import even with tools/trt_shim.py: {e}")
