"""Mamba-1 and Mamba-2 models on ssmscan ops: configs with presets, blocks, language models,
decode state.

Importing this package does not import transformers (the Hugging Face adapter lives in
``ssmscan.integrations.transformers``).
"""

from ssmscan.models.config import Mamba2Config, MambaConfig
from ssmscan.models.lm import MambaLM, build_model
from ssmscan.models.mamba import MambaBlock, MambaMixer, RMSNorm
from ssmscan.models.mamba2 import GatedRMSNorm, Mamba2Block, Mamba2Mixer
from ssmscan.models.mamba2_lm import Mamba2LM
from ssmscan.models.state import MambaState

__all__ = [
    "GatedRMSNorm",
    "Mamba2Block",
    "Mamba2Config",
    "Mamba2LM",
    "Mamba2Mixer",
    "MambaBlock",
    "MambaConfig",
    "MambaLM",
    "MambaMixer",
    "MambaState",
    "RMSNorm",
    "build_model",
]
