"""Smoke test: ``bench/short_term_memory.py`` runs and prints its table (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "short_term_memory.py"


def test_bench_prints_a_row_per_backend_and_operation(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--n",
            "40",
            "--singles",
            "10",
            "--reads",
            "2",
            "--backends",
            "inmemory,sqlite",
            "--agentscope-python",
            str(tmp_path / "no-such-venv" / "python"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith("| inmemory") or line.startswith("| sqlite")
    ]
    ops = ["add 1/call @0", "add 1/call @n", "add batch", "get all", "get by mark", "delete half"]
    assert [r.split("|")[2].strip() for r in rows] == ops * 2
    assert all(r.split("|")[4].strip() not in ("", "n/a") for r in rows)  # measured
    assert "failed" not in proc.stdout
    assert "pip install agentscope==1.0.21" in proc.stdout  # says how to get the comparison
