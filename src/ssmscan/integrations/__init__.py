"""Integrations with other libraries, one module each, imported on demand.

- ``ssmscan.integrations.transformers``: ``use_ssmscan(model)`` runs a Hugging Face transformers
  SSM model (the Mamba, FalconMamba, Jamba, Zamba, Mamba2, Bamba, GraniteMoeHybrid, NemotronH,
  FalconH1 and Zamba2 families) on ssmscan ops (needs the ``hf`` extra).
- ``ssmscan.integrations.mamba_ssm``: mamba-ssm's ``selective_scan_fn``,
  ``mamba_chunk_scan_combined`` and ``selective_state_update`` with their exact signatures, on
  ssmscan ops (change one import).

Importing this package imports none of them.
"""
