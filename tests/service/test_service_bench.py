"""Smoke test: ``bench/service_load.py`` runs a tiny load and prints its table with no lost
or duplicated message (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "service_load.py"


@pytest.mark.services
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_service_load_prints_its_table(redis_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--clients", "3", "--workers", "1", "--stores", "redis",
         "--per-client", "2", "--latency-ms", "5"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| redis |")]
    assert [row.split("|")[2].strip() for row in rows] == ["direct", "1 worker"]
    service = [cell.strip() for cell in rows[1].split("|")]
    assert service[5] == "6"  # replies measured: 3 clients x 2
    assert service[12] == "0 / 0 / 0"  # lost / duplicated / SSE id gaps
