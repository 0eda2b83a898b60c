"""ssmscan: selective scans that are fast, differentiable and deployable through PyTorch 2.

Public names only; see the README for the API.
"""

from ssmscan import export  # a callable package: ssmscan.export(...), ssmscan.export.tensorrt
from ssmscan.ops.linear_scan.api import linear_scan
from ssmscan.ops.linear_scan.reference import linear_scan_reference
from ssmscan.ops.selective_scan.api import selective_scan
from ssmscan.ops.selective_scan.reference import selective_scan_reference
from ssmscan.ops.selective_state_update.api import selective_state_update
from ssmscan.ops.ssd_scan.api import ssd_scan

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "export",
    "linear_scan",
    "linear_scan_reference",
    "selective_scan",
    "selective_scan_reference",
    "selective_state_update",
    "ssd_scan",
]
