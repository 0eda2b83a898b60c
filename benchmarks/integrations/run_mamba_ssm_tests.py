"""Run mamba-ssm's own op tests with its ops redirected to ``ssmscan.integrations.mamba_ssm``.

mamba-ssm's op tests import ``selective_scan_fn``, ``mamba_chunk_scan_combined`` and
``selective_state_update`` from mamba-ssm's modules, next to the pure-PyTorch references they
compare them with. This script loads mamba-ssm's Python modules from its source without building
or importing its CUDA extension (``selective_scan_cuda`` is a stub that raises when used, and
``mamba_ssm/__init__.py`` is not run), puts ssmscan's three functions in those modules in place of
mamba-ssm's, and runs pytest on the test files: each test then checks ssmscan against mamba-ssm's
reference with mamba-ssm's own sizes and tolerances. Everything else a test imports (the
references, mamba-ssm's Triton internals such as ``chunk_state_varlen``) stays mamba-ssm's.

The tests are those of a state-spaces/mamba checkout at the release tested (v2.3.2):
``tests/ops/test_selective_scan.py``, ``tests/ops/triton/test_ssd.py`` and
``tests/ops/triton/test_selective_state_update.py`` (the PyPI sdist ships no ``tests/ops``).

They allocate on ``device = "cuda"``. With a GPU they run as written. Without one the script
only collects them (and reports which redirected names each test module holds), unless
``--cpu`` is given: then the test files are copied with ``device = "cuda"`` rewritten to
``"cpu"`` and run on ssmscan's CPU kernels (tests of mamba-ssm's Triton internals need a GPU or
``TRITON_INTERPRET=1``; tests of functions ssmscan does not provide, such as ``mamba_inner_fn``,
fail on the stub's error).

Reading a failure: mamba-ssm's ``selective_state_update_ref`` computes the output from the new
state after rounding it to the state's dtype; ssmscan, like mamba-ssm's Triton kernel, reads it
out of the float32 state. With float16 / bfloat16 states and dstate 64 a few draws then exceed
the tests' tolerances although ssmscan's output is the closer to a float64 evaluation (CPU, torch
2.13, 2026-12-05: 4 of 324 cases of test_selective_state_update.py, each checked that way).

Usage::

    python benchmarks/integrations/run_mamba_ssm_tests.py --tests ~/mamba/tests/ops \
        [--mamba-src DIR] [--cpu] [-- PYTEST_ARGS...]

``--mamba-src`` (default ``$MAMBA_SSM_SRC`` or /tmp/mb/mamba_ssm-2.3.2.post1) is the directory
holding the ``mamba_ssm`` package source; mamba-ssm's modules need ``einops``, ``packaging`` and
``triton`` importable.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import os
import re
import sys
import tempfile
import types
from pathlib import Path

import pytest
import torch

TEST_FILES = (
    "test_selective_scan.py",
    "triton/test_ssd.py",
    "triton/test_selective_state_update.py",
)
# module of mamba-ssm -> the name in it that ssmscan provides
REDIRECTED = {
    "mamba_ssm.ops.selective_scan_interface": "selective_scan_fn",
    "mamba_ssm.ops.triton.ssd_combined": "mamba_chunk_scan_combined",
    "mamba_ssm.ops.triton.selective_state_update": "selective_state_update",
}
CUDA_DEVICE = re.compile(r"""device\s*=\s*(["'])cuda\1""")


def _cuda_extension_stub() -> types.ModuleType:
    stub = types.ModuleType("selective_scan_cuda")

    def __getattr__(name: str):
        if name.startswith("__"):  # introspection (inspect, pickle, pytest) finds nothing
            raise AttributeError(name)
        raise RuntimeError(
            f"selective_scan_cuda.{name}: mamba-ssm's CUDA extension is not loaded in this run; "
            "the test calls mamba-ssm code that ssmscan.integrations.mamba_ssm does not replace"
        )

    stub.__getattr__ = __getattr__  # type: ignore[method-assign]  # PEP 562 module hook
    return stub


def load_mamba_ssm(mamba_src: Path) -> None:
    """Make ``import mamba_ssm.<module>`` load mamba-ssm's Python modules from ``mamba_src``
    without its CUDA extension (a stub) and without running ``mamba_ssm/__init__.py``."""
    pkg_dir = mamba_src / "mamba_ssm"
    if not (pkg_dir / "ops" / "selective_scan_interface.py").is_file():
        raise SystemExit(f"no mamba_ssm package source under {mamba_src} (see --mamba-src)")
    if "mamba_ssm" in sys.modules:
        raise SystemExit("mamba_ssm is already imported; run this script in a fresh process")
    sys.modules["selective_scan_cuda"] = _cuda_extension_stub()
    pkg = types.ModuleType("mamba_ssm")
    pkg.__path__ = [str(pkg_dir)]
    pkg.__spec__ = importlib.machinery.ModuleSpec("mamba_ssm", None, is_package=True)
    pkg.__spec__.submodule_search_locations = [str(pkg_dir)]
    sys.modules["mamba_ssm"] = pkg


def install_redirect(mamba_src: Path) -> dict[str, object]:
    """``load_mamba_ssm``, then ssmscan's functions in place of mamba-ssm's in its modules.
    Returns {qualified name: function}."""
    from ssmscan.integrations import mamba_ssm as ours

    load_mamba_ssm(mamba_src)
    installed = {}
    for module_name, name in REDIRECTED.items():
        module = importlib.import_module(module_name)
        if not hasattr(module, name):
            raise SystemExit(f"{module_name} has no {name}: not the mamba-ssm release expected")
        setattr(module, name, getattr(ours, name))
        installed[f"{module_name}.{name}"] = getattr(ours, name)
    return installed


class RedirectReport:
    """pytest plugin: after collection, which names of mamba-ssm each test module holds, and
    whether the redirected ones are ssmscan's."""

    def __init__(self, installed: dict[str, object]) -> None:
        self.ours = {id(f) for f in installed.values()}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        modules = {item.module for item in session.items if hasattr(item, "module")}
        lines = ["", "mamba-ssm names held by each test module (ssmscan's marked *):"]
        for module in sorted(modules, key=lambda m: m.__name__):
            names = sorted(
                (f"{k}*" if id(v) in self.ours else k)
                for k, v in vars(module).items()
                if callable(v)
                and (id(v) in self.ours or getattr(v, "__module__", "").startswith("mamba_ssm"))
            )
            count = sum(1 for item in session.items if getattr(item, "module", None) is module)
            lines.append(f"  {module.__name__} ({count} tests): {', '.join(names) or '-'}")
        session.config.get_terminal_writer().line("\n".join(lines))


def _cpu_copies(files: list[Path], into: Path) -> list[Path]:
    copies = []
    for f in files:
        target = into / f.parent.name / f.name if f.parent.name == "triton" else into / f.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(CUDA_DEVICE.sub('device = "cpu"', f.read_text()))
        copies.append(target)
    return copies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=Path, required=True, help="mamba-ssm's tests/ops folder")
    parser.add_argument(
        "--mamba-src",
        type=Path,
        default=Path(os.environ.get("MAMBA_SSM_SRC", "/tmp/mb/mamba_ssm-2.3.2.post1")),
        help="folder holding the mamba_ssm package source",
    )
    parser.add_argument(
        "--cpu", action="store_true", help="run copies of the tests with device 'cuda' -> 'cpu'"
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)

    tests = args.tests / "ops" if (args.tests / "ops").is_dir() else args.tests
    files = [tests / f for f in TEST_FILES if (tests / f).is_file()]
    if not files:
        raise SystemExit(f"none of {', '.join(TEST_FILES)} under {tests}")
    installed = install_redirect(args.mamba_src)
    pytest_args = list(args.pytest_args)
    with tempfile.TemporaryDirectory() as tmp:
        root = tests
        if args.cpu:
            files, root = _cpu_copies(files, Path(tmp)), Path(tmp)
        elif not torch.cuda.is_available() and "--collect-only" not in pytest_args:
            print("no CUDA device: collecting only (--cpu runs CPU copies of the tests)")
            pytest_args.append("--collect-only")
        cmd = [*map(str, files), "-p", "no:cacheprovider", "--rootdir", str(root), *pytest_args]
        return int(pytest.main(cmd, plugins=[RedirectReport(installed)]))


if __name__ == "__main__":
    sys.exit(main())
