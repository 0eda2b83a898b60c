"""Every docstring example in the library runs and prints what it shows (doctest, on CPU): each
module under ``src/ssmscan`` whose source holds a ``>>>`` example is one test."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def modules_with_examples() -> list[str]:
    names = []
    for path in sorted((SRC / "ssmscan").rglob("*.py")):
        if ">>>" in path.read_text():
            parts = path.relative_to(SRC).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = modules_with_examples()


def test_examples_found():
    # the library's public entry points carry examples; an empty list means discovery broke
    for name in ("ssmscan.ops.selective_scan.api", "ssmscan.ops.linear_scan.api", "ssmscan.export"):
        assert name in MODULES, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    out: list[str] = []
    for test in finder.find(module, name):
        runner.run(test, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0, f"{name}: no example found by doctest"
    assert result.failed == 0, "".join(out)
