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
exported and compiled programs hold the same aten graph as before. ``inference_only`` is the same
decision without the device and dtype conditions: Mamba-1's channel-major prefill (Note
[channel-major prefill] in ``ssmscan.models.mamba``) takes it on every device, since it changes
only the layouts of plain aten ops and of ``ssmscan::causal_conv1d``, never a traced graph.
"""

from __future__ import annotations

import torch
from torch import nn

_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def inference_only(*tensors: torch.Tensor | None) -> bool:
    """Whether these tensors run outside training and tracing: plain tensors (parameters
    included), no gradient needed, not under ``torch.compile``, ``torch.export`` or
    ``torch.jit.trace`` (Note [fused inference]); any device and dtype.

    Args:
        tensors: the inputs and parameters of one layer; None entries are skipped.

    Returns:
        True where a model may take an inference-only path without changing any traced graph.

    Example:
        >>> import torch
        >>> from ssmscan.models.inference import inference_only
        >>> with torch.no_grad():
        ...     inference_only(torch.ones(2), None)
        True
    """
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is None:
            continue
        if type(t) is not torch.Tensor and type(t) is not nn.Parameter:
            return False
        if grad and t.requires_grad:
            return False
    return True


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
    if not inference_only(*tensors):
        return False
    return all(
        t.device.type == "cuda" and t.dtype in _FUSED_DTYPES for t in tensors if t is not None
    )
