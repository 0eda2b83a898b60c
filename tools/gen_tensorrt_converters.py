"""Regenerate ``src/ssmscan/passes/data/tensorrt_converters.json`` from Torch-TensorRT itself.

The TensorRT-readiness checker (``ssmscan.passes.tensorrt_ready``) reads that file; it lists

* ``converters``: every target in Torch-TensorRT's ``DYNAMO_CONVERTERS`` registry, and
* ``decompositions``: every op Torch-TensorRT decomposes before conversion (``get_decompositions()``),

so an op is accepted if it is converted directly or decomposed into converted ops first.

Usage (a CPU machine without TensorRT is fine):

    pip install --no-deps "torch-tensorrt==2.13.*" psutil
    python tools/gen_tensorrt_converters.py

``import torch_tensorrt`` needs a ``tensorrt`` module (PyPI's is a placeholder that downloads NVIDIA's
libraries); ``tools/trt_shim.py`` supplies an inert stand-in, enough to import the registry.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import pathlib
import subprocess
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import trt_shim

OUT = pathlib.Path(__file__).parents[1] / "src/ssmscan/passes/data/tensorrt_converters.json"


def target_name(target: object) -> str:
    """``aten.mul.Tensor`` for ops and packets, ``_operator.add`` for Python callables."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}.{getattr(target, '__name__', repr(target))}"


def pip_versions() -> str:
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", "torch-tensorrt"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        return out.splitlines()[0].strip() if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main() -> None:
    trt_shim.import_torch_tensorrt()
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import DYNAMO_CONVERTERS
    from torch_tensorrt.dynamo.lowering import get_decompositions

    converters = sorted({target_name(t) for t in DYNAMO_CONVERTERS.keys()})
    decompositions = sorted({target_name(t) for t in get_decompositions()})
    data = {
        "provenance": {
            "source": "torch_tensorrt.dynamo.conversion._ConverterRegistry.DYNAMO_CONVERTERS.keys() "
            "and torch_tensorrt.dynamo.lowering.get_decompositions()",
            "torch_tensorrt": importlib.metadata.version("torch-tensorrt"),
            "torch": torch.__version__,
            "pip_latest_seen": pip_versions(),
            "generated": datetime.date.today().isoformat(),
            "script": "tools/gen_tensorrt_converters.py",
            "note": "imported with tools/trt_shim.py (no TensorRT libraries); converter capability "
            "validators (dtype / dynamic-shape limits) are not evaluated, only registration",
        },
        "converters": converters,
        "decompositions": decompositions,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT}: {len(converters)} converters, {len(decompositions)} decompositions")


if __name__ == "__main__":
    main()
