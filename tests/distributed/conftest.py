"""Runs the context-parallel worker (``cp_worker.py``) as WORLD gloo processes, once per
(world, suite) per session, and hands the tests every rank's results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ssmscan.testing.scripts import load_script

WORKER = Path(__file__).with_name("cp_worker.py")
TIMEOUT_S = 120  # a hung collective fails the test instead of the whole run


def load_worker() -> Any:
    """The worker module (for its case ids); tests/ is not on sys.path under importlib mode."""
    return load_script(WORKER, "cp_worker")


def run_ranks(world: int, suite: str, tmp: Path) -> list[dict[str, Any]]:
    """Start ``world`` worker processes on one FileStore and return each rank's results."""
    store, out = tmp / "store", tmp / "results"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(r), str(world), str(store), str(out), suite],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=TIMEOUT_S)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{world} ranks of suite {suite!r} did not finish in {TIMEOUT_S} s")
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} exited with {p.returncode}:\n{logs[r][-3000:]}"
    return [json.loads((tmp / f"results.{r}.json").read_text()) for r in range(world)]


@pytest.fixture(scope="session")
def cp_results(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``cp_results(world, suite)``: every rank's results, each (world, suite) run once."""
    cache: dict[tuple[int, str], list[dict[str, Any]]] = {}

    def get(world: int, suite: str) -> list[dict[str, Any]]:
        if (world, suite) not in cache:
            cache[(world, suite)] = run_ranks(
                world, suite, tmp_path_factory.mktemp(f"cp-{world}-{suite}")
            )
        return cache[(world, suite)]

    return get
