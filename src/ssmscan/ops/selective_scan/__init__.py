"""The selective scan op (Mamba-1)."""
