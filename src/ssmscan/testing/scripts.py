"""Loading a script (a benchmark, a tool, a test worker) as a module by its path: such files are
not importable by name."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_script(path: str | Path, name: str) -> ModuleType:
    """The file at ``path`` executed as a fresh module called ``name`` (not added to
    ``sys.modules``).

    Example:
        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = os.path.join(d, "s.py")
        ...     _ = open(p, "w").write("X = 3")
        ...     load_script(p, "s").X
        3
    """
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"load_script: cannot load {str(path)!r} as a module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
