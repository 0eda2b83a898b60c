"""Builds ssmscan's CPU kernels: a plain C shared library (no torch headers, no Python C API),
loaded with ctypes at run time, so the build needs only a C compiler and no torch.

On x86-64 the same source is built three times — baseline x86-64, x86-64-v3 (AVX2 + FMA) and
x86-64-v4 (AVX-512) — and ``ssmscan.ops.common.cpu_lib`` loads the best one the CPU supports.
(GCC's target_clones would do this in one library, but the hot loops then lose their inlining
and vectorization: measured 10x slower.)
"""

import platform

from setuptools import Extension, setup

SOURCE = "src/ssmscan/ops/common/cpu_kernels.c"
FLAGS = [
    "-O3",
    "-std=c11",
    "-fopenmp-simd",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=fast",
]

if platform.machine().lower() in ("x86_64", "amd64"):
    VARIANTS = {"": ["-march=x86-64"], "_v3": ["-march=x86-64-v3"], "_v4": ["-march=x86-64-v4"]}
else:
    VARIANTS = {"": []}

setup(
    ext_modules=[
        Extension(
            f"ssmscan._cpu_kernels{suffix}", sources=[SOURCE], extra_compile_args=FLAGS + extra
        )
        for suffix, extra in VARIANTS.items()
    ]
)
