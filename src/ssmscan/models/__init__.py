"""Mamba-1 models on ssmscan ops: config with presets, block, language model, decode state.

Importing this package does not import transformers (the Hugging Face adapter lives in
``ssmscan.integrations.transformers``).
"""

from ssmscan.models.config import MambaConfig
from ssmscan.models.lm import MambaLM, build_model
from ssmscan.models.mamba import MambaBlock, MambaMixer, RMSNorm
from ssmscan.models.state import MambaState

__all__ = [
    "MambaBlock",
    "MambaConfig",
    "MambaLM",
    "MambaMixer",
    "MambaState",
    "RMSNorm",
    "build_model",
]
