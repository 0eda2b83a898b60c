"""Target ``"aoti"``: an AOTInductor package (``.pt2``) that runs without ssmscan installed.

CPU: the ssmscan ops are realized first (loop by default: Inductor turns ``higher_order.scan``
into a C++ ``while`` loop, any length; 4.2 ms vs 24 ms for the parallel form at batch 1, dim 128,
L 1024 on 2 cores), so the package holds only Inductor's own code. CUDA: the ops stay, and
Inductor compiles their Triton kernels into the package (``torch.library.triton_op`` recipe).

The package takes and returns plain tensors (see ``_prepare``), so ``aoti_load_package`` needs
nothing but torch. On CPU, token ids are range-checked inside the package (a clean
``RuntimeError`` instead of an out-of-bounds read that aborts the process). AOTInductor compiles checks of every input's dtype, shape and
strides into the package but runs them only where ``AOTI_RUNTIME_CHECK_INPUTS=1`` is set (torch
2.11-2.13 have no compile option that turns them on); :meth:`ExportResult.run` checks inputs
against the signature itself.

Before this process loads a package, a fresh process loads it (Note [aoti load probe]).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import torch

from ._common import (
    ExportReport,
    ExportResult,
    example_device,
    file_size,
    flat_outputs,
    temp_artifact,
)
from ._lowering import assert_id_ranges, bind_scan_sizes, lower_for_loop_backends
from ._prepare import Prepared
from .program import export_prepared


def _inductor_configs() -> dict[str, Any]:
    # A dynamic dimension may go down to 1 (the batch does); Inductor's runtime input checks
    # assume a lower bound of 2 for backed sizes unless told not to check lower bounds.
    if hasattr(torch._inductor.config.aot_inductor, "check_lowerbound"):
        return {"aot_inductor.check_lowerbound": False}
    return {}


# Note [aoti load probe]: loading a package runs its shared library's initialisers. Where the
# C++ compiler Inductor used links a libstdc++ other than the one this process loaded (a GPU
# machine's compiler under /opt/gcc: a segfault in std::regex), loading kills the process, and
# with it every result the caller held (``ssmscan report``'s other rows). A fresh process loads
# it first: if that one dies by a signal, ``build`` raises instead. Any other failure there is
# left to the in-process load, which raises its own error.
_LOAD_PROBE = "import sys, torch; torch._inductor.aoti_load_package(sys.argv[1])"


def probe_load(path: str, timeout_s: float = 600.0) -> None:
    """Load the package at ``path`` in a fresh Python process (Note [aoti load probe]).

    Raises:
        RuntimeError: the process loading it was killed by a signal; the message names the
            signal, the usual cause and the end of its stderr.
    """
    res = subprocess.run(
        [sys.executable, "-c", _LOAD_PROBE, path],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if res.returncode >= 0:
        return
    try:
        name = signal.Signals(-res.returncode).name
    except ValueError:
        name = f"signal {-res.returncode}"
    tail = " | ".join(res.stderr.strip().splitlines()[-3:])
    raise RuntimeError(
        f"loading the AOTInductor package {path} killed a fresh Python process ({name}), so it "
        "was not loaded here. The usual cause: the C++ compiler Inductor used links a libstdc++ "
        "other than this Python's; build with the system compiler (CXX=/usr/bin/g++)."
        + (f" Its stderr ended: {tail}" if tail else "")
    )


def build(
    prepared: Prepared,
    path: str | None,
    realization: str | None,
    algorithm: str,
) -> ExportResult:
    device = example_device(prepared.example_inputs)
    report = ExportReport("aoti")
    ep = export_prepared(prepared, report)
    signature = prepared.signature(ep, device)
    if device.type == "cpu" or realization is not None:
        lower_for_loop_backends(ep, realization or "loop", algorithm, report)
        if bind_scan_sizes(ep):
            report.notes.append("scan loops given their symbolic sizes (dynamic batch)")
    else:
        report.notes.append("ssmscan ops kept: their Triton kernels are compiled into the package")
    # on CPU an out-of-range id would end the process inside an OpenMP loop; on CUDA the
    # embedding's own device-side assert already stops it, and an in-graph check could do no more
    if device.type == "cpu" and assert_id_ranges(ep, signature):
        report.notes.append("token ids are range-checked inside the package")
    report.census(ep)
    temp_dir = None
    if path is None:
        temp_dir, path = temp_artifact("aoti", "model.pt2")
    with report.stage("aoti compile"):
        torch._inductor.aoti_compile_and_package(
            ep, package_path=path, inductor_configs=_inductor_configs()
        )
    report.artifact_bytes = file_size(path)
    with report.stage("aoti load probe"):
        probe_load(path)
    with report.stage("aoti load"):
        runner = torch._inductor.aoti_load_package(path)

    def run(*inputs: Any) -> list[torch.Tensor]:
        with torch.no_grad():
            return flat_outputs(runner(*inputs))

    return ExportResult("aoti", runner, path, report, run, signature, temp_dir)
