"""Builds ssmscan's CPU kernels: a plain C shared library (no torch headers, no Python C API),
loaded with ctypes at run time, so the build needs only a C compiler and no torch."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ssmscan._cpu_kernels",
            sources=["src/ssmscan/ops/common/cpu_kernels.c"],
            extra_compile_args=["-O3", "-fopenmp-simd", "-fno-math-errno", "-std=c11"],
        )
    ]
)
