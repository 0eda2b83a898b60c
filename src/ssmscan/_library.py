"""The one torch.library namespace of ssmscan, and how its Triton-backed ops are defined.

Every op lives under ``torch.ops.ssmscan``. Op modules import ``qualname`` and ``triton_backed_op``
from here, so the namespace and the registration recipe are written once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._library.custom_ops import CustomOpDef
from torch._library.triton import set_wrap_triton_enabled

NAMESPACE = "ssmscan"


def qualname(name: str) -> str:
    """``"selective_scan_fwd"`` -> ``"ssmscan::selective_scan_fwd"``."""
    return f"{NAMESPACE}::{name}"


def triton_backed_op(name: str) -> Callable[[Callable[..., Any]], CustomOpDef]:
    """Define op ``ssmscan::<name>`` exactly as ``torch.library.triton_op`` does, minus its
    scan of the body's source for Triton kernels.

    That scan imports Triton and ``torch._inductor`` when the op is defined, which made
    ``import ssmscan`` about 1.7 s slower; it also finds nothing here, because our bodies import
    their kernel modules lazily (only for CUDA tensors). The recipe, as in torch 2.11-2.13:

    * a ``custom_op`` whose eager implementation is the body, run with ``wrap_triton`` disabled
      (direct kernel launches, no HOP dispatch);
    * the body as the fake (it only allocates and launches, so it traces);
    * under ``FunctionalTensorMode`` (AOTAutograd: ``torch.compile``, AOTInductor) the op is
      decomposed into its body, so Inductor sees the Triton kernels; ``torch.export`` keeps the
      op as one node (``custom_triton_ops_decomposition_disabled``).
    """

    def register(fn: Callable[..., Any]) -> CustomOpDef:
        from torch._library.infer_schema import infer_schema
        from torch._subclasses.functional_tensor import FunctionalTensorMode

        def backend_fn(*args: Any, **kwargs: Any) -> Any:
            with set_wrap_triton_enabled(False):
                return fn(*args, **kwargs)

        op = torch.library.custom_op(
            qualname(name), backend_fn, mutates_args=(), schema=infer_schema(fn, mutates_args=())
        )
        op.register_fake(fn)

        def functional_decomp(mode: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
            from torch._subclasses.fake_tensor import FakeTensor
            from torch._subclasses.functional_tensor import FunctionalTensor
            from torch.export._trace import custom_triton_ops_decomposition_disabled

            if custom_triton_ops_decomposition_disabled():
                return mode.__torch_dispatch__(func, types, args, kwargs)
            known = (torch.Tensor, FunctionalTensor)
            if any(not issubclass(t, FakeTensor) and t not in known for t in types):
                return NotImplemented
            with mode:
                return fn(*args, **kwargs)

        op.register_torch_dispatch(FunctionalTensorMode, functional_decomp)
        return op

    return register
