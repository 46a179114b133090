"""The ``mnemoscope`` command as a user runs it: a subprocess, no configuration given."""

from __future__ import annotations

import os
import subprocess
import sys

from mnemoscope.testing import OpenAICompatServer

CLEAN_ENV = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(("MNEMOSCOPE_", "OPENAI_", "DASHSCOPE_", "ANTHROPIC_"))
}


def _run(
    *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mnemoscope.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env or CLEAN_ENV,
    )


def test_chat_without_a_model_says_exactly_how_to_configure_one() -> None:
    proc = _run("chat")
    assert proc.returncode == 2
    for needle in (
        "MNEMOSCOPE_PROVIDER",
        "MNEMOSCOPE_MODEL",
        "--base-url",
        "ollama",
        "mnemoscope demo",
    ):
        assert needle in proc.stderr


def test_chat_talks_to_an_openai_compatible_server(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with OpenAICompatServer(["Hello from the server."]) as server:
        env = {
            **CLEAN_ENV,
            "MNEMOSCOPE_MODEL": "local-model",
            "MNEMOSCOPE_BASE_URL": server.base_url,
        }
        proc = _run("chat", "--session-db", str(tmp_path / "s.db"), stdin="hi there\n\n", env=env)
        requests = server.chat_requests
    assert proc.returncode == 0, proc.stderr
    assert "Hello from the server." in proc.stdout
    assert requests[0]["messages"][-1] == {"role": "user", "content": "hi there"}
    assert (tmp_path / "s.db").exists()


def test_demo_runs_offline() -> None:
    proc = _run("demo")
    assert proc.returncode == 0, proc.stderr
    assert "agent one saves memories" in proc.stdout
    assert "[tool] Write" in proc.stdout
    assert "agent two" in proc.stdout and "hint injected" in proc.stdout


def test_no_command_prints_help() -> None:
    proc = _run()
    assert proc.returncode == 2
    assert "chat" in proc.stdout and "demo" in proc.stdout and "memory" in proc.stdout
