"""Smoke test: ``bench/agent_overhead.py`` runs and prints its table (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "agent_overhead.py"


def test_agent_overhead_prints_mnemoscope_rows(tmp_path: Path) -> None:
    out_json = tmp_path / "out.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--replies",
            "5",
            "--skip-agentscope",
            "--json",
            str(out_json),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| scenario |"))
    assert "mnemoscope median µs" in header
    assert "AS2" not in header  # --skip-agentscope: no AgentScope columns
    first = lines[lines.index(header) + 2 :]  # the overhead table, up to its first blank line
    rows = [line for line in first[: first.index("")] if line.startswith("| ")]
    labels = [row.split("|")[1].strip() for row in rows]
    for expected in (
        "0 tools",
        "1 tool",
        "5 tools, 1 step (parallel calls)",
        "5 tools, 5 steps (sequential)",
        "1 tool + no-op middleware",
    ):
        assert expected in labels, labels
    for row in rows:
        median = row.split("|")[4].strip()
        assert float(median) > 0, row
    assert '"tools5_sequential+mw"' in out_json.read_text()
    sleeping = next(i for i, line in enumerate(lines) if "Tools that take time" in line)
    sleep_rows = [line for line in lines[sleeping + 4 :] if line.startswith("| ")]
    assert sleep_rows and all(row.split("|")[-2].strip().endswith("x") for row in sleep_rows)
