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
         "--per-client", "2", "--latency-ms", "5", "--rates", "closed,40"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| redis |")]
    assert [row.split("|")[2].strip() for row in rows] == ["direct", "1 worker"] * 2
    for service, load in zip(rows[1::2], ["3", "3 @ 40/s"], strict=True):  # closed, open loop
        cells = [cell.strip() for cell in service.split("|")]
        assert cells[3] == load
        assert cells[5] == "6"  # replies measured: 3 clients x 2
        assert cells[12] == "0 / 0 / 0"  # lost / duplicated / SSE id gaps
        assert float(cells[13]) > 0  # the server's CPU ms per reply
