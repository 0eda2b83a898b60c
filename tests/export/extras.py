"""Skip markers of the export tests for targets whose packages are optional extras."""

from __future__ import annotations

import pytest


def executorch_missing() -> str | None:
    """Why ExecuTorch cannot run here, or None."""
    try:
        import executorch.exir
        import executorch.runtime  # noqa: F401
    except ImportError as e:
        return f"executorch not importable here ({e}); pip install 'ssmscan[executorch]'"
    return None


needs_executorch = pytest.mark.skipif(
    executorch_missing() is not None, reason=str(executorch_missing())
)
