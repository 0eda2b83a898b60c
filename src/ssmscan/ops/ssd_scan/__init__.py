"""Mamba-2's state-space dual (SSD) scan."""
