"""Note [kernel sources under Inductor] (``ssmscan.ops.common.triton_launch``): the source of
every Triton kernel of ``ssmscan.ops``, with every ``@triton.jit`` function it calls, as
Inductor collects it for a traced launch, survives being written into a plain triple-quoted
string and compiled from it."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

triton = pytest.importorskip("triton")


def _kernels() -> dict[str, object]:
    import ssmscan.ops

    found = {}
    for info in pkgutil.walk_packages(ssmscan.ops.__path__, "ssmscan.ops."):
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            fn = getattr(obj, "fn", None)
            if name.endswith("_kernel") and fn is not None and fn.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_kernel_is_found():
    names = _kernels()
    # the selective scan's lane backward (the one whose PTX had escapes) and its peers
    assert "ssmscan.ops.selective_scan.triton_bwd_lane._selective_scan_bwd_lane_kernel" in names
    assert "ssmscan.ops.linear_scan.triton_fwd._linear_scan_fwd_kernel" in names
    assert len(names) >= 15, sorted(names)


@pytest.mark.parametrize("name", sorted(_kernels()))
def test_kernel_source_survives_inductor_embedding(name):
    from torch._inductor.codegen.wrapper import (
        user_defined_triton_kernel_transitive_closure_source_code as closure,
    )

    kernel = _kernels()[name]
    if not hasattr(kernel, "src"):  # an interpreted kernel (TRITON_INTERPRET): Triton's own
        kernel = triton.runtime.jit.JITFunction(kernel.fn)
    src = closure(kernel)
    assert "\\" not in src, [line for line in src.splitlines() if "\\" in line]
    embedded = eval("'''" + src + "'''")  # what the wrapper module's string literal holds
    compile(embedded, name, "exec")
