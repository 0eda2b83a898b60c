"""The README's install commands resolve: the test extra's Triton requirement admits the exact
Triton that torch's CUDA wheels require (a CPU torch requires none), and the ``ssmscan`` console
script's front module is shipped in the distribution."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

packaging = pytest.importorskip("packaging", reason="packaging parses the requirements")
from packaging.requirements import Requirement  # noqa: E402

PYPROJECT = (Path(__file__).parents[1] / "pyproject.toml").read_text()
LINUX_X86 = {"platform_system": "Linux", "platform_machine": "x86_64"}


def _test_extra_triton() -> Requirement:
    test_extra = re.search(r"^test = \[(.*?)^\]", PYPROJECT, re.MULTILINE | re.DOTALL)
    assert test_extra, "pyproject.toml has no test extra"
    (line,) = [s for s in re.findall(r'"([^"]+)"', test_extra.group(1)) if s.startswith("triton")]
    return Requirement(line)


# The Triton torch 2.13.0's CUDA wheels on PyPI require (``triton==3.7.1; platform_system ==
# "Linux"``, as pip's resolver reports it), and the one beside torch 2.11 on the GPU machine.
ADMITTED = {"torch-2.13.0-pypi": "3.7.1", "gpu-machine-torch-2.11": "3.6.0"}


@pytest.mark.parametrize("version", list(ADMITTED.values()), ids=list(ADMITTED))
def test_test_extra_admits_the_triton_torch_requires(version):
    req = _test_extra_triton()
    assert req.marker is not None and req.marker.evaluate(LINUX_X86)
    assert req.specifier.contains(version), (
        f"the test extra's {req} conflicts with triton {version}"
    )


def test_test_extra_admits_the_installed_torchs_triton():
    """Here: whatever Triton the installed torch requires (none for a CPU build) and the one
    installed must both satisfy the test extra."""
    req = _test_extra_triton()
    pins = [
        Requirement(r)
        for r in importlib.metadata.requires("torch") or []
        if Requirement(r).name == "triton"
    ]
    for pin in pins:  # a CUDA torch: exactly one, ==X
        (spec,) = pin.specifier
        assert req.specifier.contains(spec.version), f"{req} against torch's {pin}"
    try:
        installed = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        assert not pins  # torch would have brought it
        return
    assert req.specifier.contains(installed), f"{req} does not admit the installed {installed}"


def test_console_script_front_is_shipped():
    module = re.search(r'^ssmscan\s*=\s*"([\w.]+):\w+"', PYPROJECT, re.MULTILINE)
    assert module, "pyproject.toml declares no ssmscan console script"
    name = module.group(1)
    if "." not in name:  # a top-level module beside the package: it must be listed
        assert re.search(rf'^py-modules = \[[^\]]*"{name}"', PYPROJECT, re.MULTILINE), name
        assert (Path(__file__).parents[1] / "src" / f"{name}.py").is_file()
