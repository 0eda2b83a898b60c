"""The product speaks of the product: no tracked file refers to the work process that built it
(work sessions, issue numbers, numbered device runs). Git history is that record."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_ORDINAL = (
    r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
    r"|\w+teenth|\w*tieth|\w+-(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth))"
)
PATTERNS = {
    "numbered session": re.compile(_ORDINAL + r"\s+sessions?\b", re.I),
    "demonstrative + work period": re.compile(
        r"\b(?:this|that|next|last|earlier|previous|each|later|same|one)\s+session\b", re.I
    ),
    "issue number": re.compile(r"\bissues?\s+#?\d+\b", re.I),
    "numbered device script": re.compile(r"\bdevice_\w+\d\.sh\b"),
}
SKIP_SUFFIXES = (".png", ".json", ".onnx", ".pte", ".so")


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    this = Path(__file__).resolve()
    return [ROOT / f for f in out.split() if not f.endswith(SKIP_SUFFIXES) and ROOT / f != this]


def find_process_words(text: str) -> list[tuple[int, str, str]]:
    """(line number, pattern name, line) for every line that speaks of the work process."""
    hits = []
    for i, line in enumerate(text.splitlines(), 1):
        for name, pat in PATTERNS.items():
            if pat.search(line):
                hits.append((i, name, line.strip()))
    return hits


# The positive samples are assembled at run time so that this file holds none of the phrases it
# looks for.
_S, _I = "ses" + "sion", "is" + "sue"


@pytest.mark.parametrize(
    "text, found",
    [
        (f"measured in the twenty-seventh {_S}", True),
        (f"see {_I} 4 for the targets", True),
        ("`device_" + "thirtieth3.sh` ran it", True),
        (f"this {_S}'s kernels", True),
        ("an ONNX Runtime InferenceSession runs the file", False),
        ("upstream bug pytorch#181735", False),
    ],
    ids=["ordinal-session", "issue-number", "device-script", "this-session", "ort", "upstream"],
)
def test_patterns(text, found):
    assert bool(find_process_words(text)) is found


def test_no_tracked_file_speaks_of_the_work_process():
    hits = []
    for path in _tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        hits += [
            f"{path.relative_to(ROOT)}:{i}: [{name}] {line[:100]}"
            for i, name, line in find_process_words(text)
        ]
    assert not hits, "process words in tracked files:\n" + "\n".join(hits)
