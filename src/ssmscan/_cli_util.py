"""Pieces of the ``ssmscan`` command line shared by its modules: target names, errors, progress."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from typing import NoReturn

ALL_TARGETS = ("eager", "compile", "export", "aoti", "onnx", "tensorrt", "executorch")
EXPORT_TARGETS = ("export", "onnx", "aoti", "tensorrt", "executorch")
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


class UsageError(Exception):
    """Bad command-line input: reported as one line on stderr, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``prog: error: message (see --help)``), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


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
