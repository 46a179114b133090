"""Every ```python example in README.md and docs/*.md runs.

Each block runs as its own script in a fresh temporary directory, with a timeout. A block
whose first line starts with ``# not run in tests:`` is excluded; the rest of that line
says why (e.g. it needs an API key), and the test below checks there is a reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
NOT_RUN = "# not run in tests:"
NEEDS = {
    # a block mentioning one of these needs that service; CI runs them all
    "redis://": ("Redis", 6379),
    "postgresql": ("PostgreSQL", 5432),
    "mysql": ("MariaDB", 3306),
}


def _blocks() -> list[tuple[str, int, str]]:
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for i, m in enumerate(FENCE.finditer(text)):
            out.append((doc.relative_to(ROOT).as_posix(), i, m.group(1)))
    return out


BLOCKS = _blocks()


@pytest.mark.parametrize(
    "doc, index, code",
    [b for b in BLOCKS if not b[2].lstrip().startswith(NOT_RUN)],
    ids=[f"{b[0]}#{b[1]}" for b in BLOCKS if not b[2].lstrip().startswith(NOT_RUN)],
)
def test_doc_example_runs(
    doc: str,
    index: int,
    code: str,
    tmp_path: Path,
    service_checker,  # type: ignore[no-untyped-def]
) -> None:
    for needle, (service, port) in NEEDS.items():
        if needle in code:
            service_checker(service, "127.0.0.1", port)
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONWARNINGS": "error::RuntimeWarning", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, f"{doc} example #{index} failed:\n{proc.stdout}\n{proc.stderr}"


def test_excluded_examples_say_why() -> None:
    for doc, index, code in BLOCKS:
        first = code.lstrip().splitlines()[0] if code.strip() else ""
        if first.startswith(NOT_RUN):
            assert len(first) > len(NOT_RUN) + 5, (
                f"{doc} example #{index} must say why it is not run"
            )


def test_there_are_examples() -> None:
    assert len(BLOCKS) >= 2
