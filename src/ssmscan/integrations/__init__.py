"""Integrations with other libraries, one module each, imported on demand.

- ``ssmscan.integrations.transformers``: ``use_ssmscan(model)`` runs a Hugging Face transformers
  SSM model (the Mamba, FalconMamba, Jamba and Zamba families) on ssmscan ops (needs the ``hf``
  extra).

Importing this package imports none of them.
"""
