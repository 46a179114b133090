"""``mnemoscope inspect``: arguments, errors, and a real server process signed into."""

from __future__ import annotations

import argparse
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("uvicorn", reason="the 'inspector' extra (uvicorn) is not installed")

from mnemoscope.cli._inspect import add_inspect_parser, build_app
from mnemoscope.errors import UserError

PARSER = """
import argparse, sys
from mnemoscope.cli._inspect import add_inspect_parser
p = argparse.ArgumentParser(prog="mnemoscope")
add_inspect_parser(p.add_subparsers(dest="command"))
args = p.parse_args(sys.argv[1:])
sys.exit(args.handler(args))
"""


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="mnemoscope")
    add_inspect_parser(p.add_subparsers(dest="command"))
    return p.parse_args(["inspect", *argv])


def test_inspect_needs_something_to_show() -> None:
    with pytest.raises(UserError, match="--store URL, --ltm PATH, --mem0 DIR or --workdir DIR"):
        build_app(parse())


def test_inspect_without_tokens_makes_a_one_user_sign_in_link(tmp_path: Path) -> None:
    args = parse(
        "--store",
        f"sqlite+aiosqlite:///{tmp_path / 's.db'}",
        "--user",
        "alice",
        "--audit",
        str(tmp_path / "a.db"),
    )
    _app, link = build_app(args)
    assert link.startswith("/signin?token=") and len(link) > 30
    _app2, link2 = build_app(args)
    assert link2 != link  # a fresh random token per start


def test_inspect_with_a_token_file_and_a_shared_workdir_is_refused(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("t1 alice\nt2 bob\n")
    args = parse("--workdir", str(tmp_path), "--tokens", str(tokens))
    with pytest.raises(UserError, match=r"\{user_id\}"):
        build_app(args)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lines(stream: Any, out: queue.Queue[str]) -> None:
    for line in stream:
        out.put(line)


def test_inspect_serves_the_page_for_the_printed_link(world_sync: Any, tmp_path: Path) -> None:
    port = _free_port()
    env = dict(os.environ)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PARSER,
            "inspect",
            "--store",
            world_sync.store_url,
            "--ltm",
            world_sync.ltm_path,
            "--user",
            "alice",
            "--port",
            str(port),
            "--audit",
            str(tmp_path / "audit.db"),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stderr, lines), daemon=True).start()
    try:
        first = lines.get(timeout=60)
        assert "open http://127.0.0.1:" in first, first
        link = first.split("open ", 1)[1].strip()
        deadline = time.monotonic() + 30
        with httpx.Client(follow_redirects=True, timeout=10) as client:
            while True:
                try:
                    r = client.get(link)
                    break
                except httpx.TransportError:
                    assert proc.poll() is None and time.monotonic() < deadline, "no server"
                    time.sleep(0.1)
            assert r.status_code == 200 and "signed in as <b>alice</b>" in r.text
            assert "s1" in r.text
            assert "green tea" in client.get(link.split("/signin")[0] + "/memory").text
            anonymous = httpx.get(link.split("/signin")[0] + "/memory", timeout=10)
            assert anonymous.status_code == 401
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def test_a_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from mnemoscope.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, "starlette", None)  # import starlette -> ImportError
    monkeypatch.delitem(sys.modules, "mnemoscope.inspector._app", raising=False)
    with pytest.raises(MissingExtraError, match=r"pip install 'mnemoscope\[inspector\]'"):
        importlib.import_module("mnemoscope.inspector._app")
    monkeypatch.delitem(sys.modules, "mnemoscope.inspector._app", raising=False)


def test_every_public_name_of_the_inspector_imports() -> None:
    import mnemoscope.inspector as pkg

    names = list(pkg.__all__)
    assert names == sorted(names)
    for name in names:
        assert getattr(pkg, name) is not None, name
