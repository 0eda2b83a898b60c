"""Pieces shared by several ops (the CPU kernel library, argument checks)."""
