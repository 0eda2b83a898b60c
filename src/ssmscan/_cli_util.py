"""Pieces of the ``ssmscan`` command line shared by its modules: target names, errors, progress."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
import warnings
from collections.abc import Iterator

from _ssmscan_cli import (  # the parser's half, importable without torch
    ALL_TARGETS,
    EXPORT_TARGETS,
    UsageError,
)

__all__ = [
    "ALL_TARGETS",
    "EXPORT_TARGETS",
    "MODEL_TOLERANCE_FACTOR",
    "STATIC_ONLY",
    "SUFFIX",
    "Heartbeat",
    "UsageError",
    "progress",
    "quiet_known_noise",
    "ticking",
]

STATIC_ONLY = frozenset({"tensorrt"})  # the parallel realization is planned for one length
SUFFIX = {
    "export": ".pt2",
    "aoti": ".pt2",
    "onnx": ".onnx",
    "tensorrt": ".ep",
    "executorch": ".pte",
}
# A whole model compounds the op's rounding over its layers: 10x the op's float32 tolerance.
MODEL_TOLERANCE_FACTOR = 10.0


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def ticking(label: str, every: float = 10.0) -> Iterator[None]:
    """Print ``label ...`` now and ``label ... N s`` every ``every`` seconds until done."""
    progress(f"{label} ...")
    t0, done = time.perf_counter(), threading.Event()

    def tick() -> None:
        while not done.wait(every):
            progress(f"{label} ... {time.perf_counter() - t0:.0f} s")

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def quiet_known_noise() -> None:
    """Silence messages that say nothing about the user's model (torch's ONNX registry about
    torchvision, pytree's LeafSpec deprecation raised inside torch's own export code)."""
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")


class Heartbeat:
    """A progress printer for long runs: each call prints a line to stderr, and while nothing is
    printed for ``every`` seconds, ``<last line> ... N s`` says the step is still running.

    Use as a context manager; inside, call it with each step's line.
    """

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self._label = ""
        self._since = time.perf_counter()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def __call__(self, msg: str) -> None:
        with self._lock:
            progress(msg)
            self._label, self._since = msg.rstrip(". "), time.perf_counter()

    def _tick(self) -> None:
        while not self._done.wait(self.every):
            with self._lock:
                quiet = time.perf_counter() - self._since
                if self._label and quiet >= self.every:
                    progress(f"{self._label} ... {quiet:.0f} s")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
