"""When the models take their fused inference kernels.

Note [fused inference]: on CUDA, when no gradient is needed, the models' norms, their prefill
convolution and decode conv step run as one Triton kernel each (``ssmscan::rms_norm``,
``ssmscan::add_rms_norm``, ``ssmscan::gated_rms_norm``, ``ssmscan::causal_conv1d``,
``ssmscan::conv1d_step``) instead of a dozen element-wise aten kernels and layout copies. Which path runs is
decided from the inputs alone: every tensor a plain CUDA tensor (parameters included; a fake or
functional tensor of a trace is a subclass and does not count) in float16, bfloat16 or float32;
no gradient needed (grad mode off, under ``torch.no_grad`` / ``torch.inference_mode``, or
nothing requiring grad); not under ``torch.compile``, ``torch.export`` or ``torch.jit.trace``.
Everywhere else (CPU, training, float64, traced programs) the PyTorch modules run unchanged, so
exported and compiled programs hold the same aten graph as before.
"""

from __future__ import annotations

import torch
from torch import nn

_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def fused_inference(*tensors: torch.Tensor | None) -> bool:
    """Whether the fused inference kernels apply to these tensors (Note [fused inference]).

    Args:
        tensors: the inputs and parameters of one norm or conv step; None entries (absent
            optional inputs) are skipped.

    Returns:
        True on CUDA without gradients, outside tracing; False otherwise.

    Example:
        >>> import torch
        >>> from ssmscan.models.inference import fused_inference
        >>> fused_inference(torch.ones(2), None)  # CPU: the PyTorch path
        False
    """
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is None:
            continue
        if type(t) is not torch.Tensor and type(t) is not nn.Parameter:
            return False
        if t.device.type != "cuda" or t.dtype not in _FUSED_DTYPES:
            return False
        if grad and t.requires_grad:
            return False
    return True
