"""The one torch.library namespace of ssmscan.

Every op lives under ``torch.ops.ssmscan``. Op modules import ``NAMESPACE`` and ``qualname`` from
here, so the namespace is spelled once.
"""

NAMESPACE = "ssmscan"


def qualname(name: str) -> str:
    """``"selective_scan_fwd"`` -> ``"ssmscan::selective_scan_fwd"``."""
    return f"{NAMESPACE}::{name}"
