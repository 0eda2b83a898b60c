"""A stand-in ``tensorrt`` module so that ``import torch_tensorrt`` succeeds without TensorRT.

PyPI's ``tensorrt`` is a placeholder that downloads the real libraries from NVIDIA at install time,
which these machines cannot reach. Torch-TensorRT only needs the module to import its converter
registry (it touches ``trt.ITensor``, enums, ``trt.__version__`` at import time); every attribute of
this stand-in is an inert class. Never use it for anything that builds an engine.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import types
from typing import Any


class _AnyMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make(f"{cls.__name__}.{name}")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __iter__(cls) -> Any:
        return iter(())

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls


_CLASSES: dict[str, type] = {}


def _make(name: str) -> type:
    """One inert class per leaf name, so ``trt.ITensor is trt.tensorrt.ITensor`` holds."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf not in _CLASSES:
        body = {"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: None}
        _CLASSES[leaf] = _AnyMeta(leaf, (), body)
    return _CLASSES[leaf]


class _ShimModule(types.ModuleType):
    __version__ = "11.0.0"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _make(name)


def install(version: str = "11.0.0") -> None:
    """Put the stand-in into ``sys.modules`` as ``tensorrt`` (and ``tensorrt.plugin``)."""
    for name in ("tensorrt", "tensorrt.plugin", "tensorrt_bindings"):
        mod = _ShimModule(name)
        mod.__version__ = version
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
        mod.__path__ = []  # type: ignore[attr-defined]
        mod.__file__ = __file__
        sys.modules[name] = mod
    if "dllist" not in sys.modules:  # a --no-deps install lacks this small dependency
        try:
            importlib.import_module("dllist")
        except ImportError:
            dl = types.ModuleType("dllist")
            dl.dllist = lambda: []  # type: ignore[attr-defined]
            sys.modules["dllist"] = dl


def import_torch_tensorrt() -> types.ModuleType:
    """Import ``torch_tensorrt`` on a machine with neither TensorRT nor CUDA."""
    import torch

    install()
    saved_capability, saved_load = torch.cuda.get_device_capability, torch.ops.load_library
    saved_current = torch.cuda.current_device
    saved_isfile = os.path.isfile

    def isfile(path: Any) -> bool:  # hide the C++ runtime: feature flags then skip it
        if "torch_tensorrt" in str(path) and str(path).endswith((".so", ".dll")):
            return False
        return saved_isfile(path)

    os.path.isfile = isfile
    if not hasattr(torch._C, "_CudaDeviceProperties"):  # named in annotations; absent on CPU builds
        torch._C._CudaDeviceProperties = _make("_CudaDeviceProperties")  # type: ignore[attr-defined]

    def load_library(path: str) -> None:  # its C++ runtime links libnvinfer: skip it
        if "torch_tensorrt" not in str(path):
            saved_load(path)

    if not torch.cuda.is_available():  # probed at import time (Thor / TRT-LLM checks)
        torch.cuda.get_device_capability = lambda *a, **k: (0, 0)  # type: ignore[assignment]
        torch.cuda.current_device = lambda: 0  # default settings name device 0
    torch.ops.load_library = load_library  # type: ignore[method-assign]
    try:
        return importlib.import_module("torch_tensorrt")
    finally:
        torch.cuda.get_device_capability = saved_capability
        torch.cuda.current_device = saved_current
        os.path.isfile = saved_isfile
        torch.ops.load_library = saved_load  # type: ignore[method-assign]
