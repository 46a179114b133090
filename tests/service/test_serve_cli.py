"""``mnemoscope serve``: argument errors are one clear line; ``--workers 2`` runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")

from mnemoscope.cli import main

from .conftest import ALICE, parse_sse


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tokens", "missing-file.txt"], "token file"),
        (["--tokens", "{tokens}", "--workers", "2"], "needs a shared --store"),
        (["--tokens", "{tokens}", "--store", "mysql://x/y"], "is not supported"),
        (["--tokens", "{bad_tokens}"], "line 1: expected 'token user_id'"),
        (["--tokens", "{tokens}", "--lock-ttl", "0.5"], "twice poll_interval"),
    ],
)
def test_serve_argument_errors(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("a-long-token-1 alice\n")
    bad = tmp_path / "bad.txt"
    bad.write_text("just-one-field\n")
    args = [a.format(tokens=tokens, bad_tokens=bad) for a in args]
    assert main(["serve", "svc_factory:make_agent", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mnemoscope serve: error:") and message in err


def test_serve_bad_factory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text('{"a-long-token-1": "alice"}')
    assert main(["serve", "nowhere_xyz:make", "--tokens", str(tokens)]) == 2
    assert "cannot import 'nowhere_xyz'" in capsys.readouterr().err


@pytest.mark.services
@pytest.mark.timeout(90)
async def test_serve_with_two_uvicorn_workers(workers: Any, redis_url: str, unique_id: str) -> None:
    (server,) = workers(redis_url, 1, redis_url, args=("--workers", "2"))
    sids = [f"cli{unique_id}{i}" for i in range(4)]
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as c:
        for sid in sids:
            assert (
                await c.post("/v1/sessions", json={"session_id": sid}, headers=ALICE)
            ).status_code == 201

        async def talk(sid: str) -> None:
            for m in range(3):
                r = await c.post(
                    f"/v1/sessions/{sid}/messages", json={"content": f"m{m}"}, headers=ALICE
                )
                assert parse_sse(r.text)[-1]["event"] == "reply_end"

        await asyncio.gather(*(talk(s) for s in sids))
        for sid in sids:
            history = (await c.get(f"/v1/sessions/{sid}/history", headers=ALICE)).json()["messages"]
            assert [m["msg"]["content"][0]["text"] for m in history] == [
                t for m in range(3) for t in (f"m{m}", f"echo: m{m}")
            ]
            await c.delete(f"/v1/sessions/{sid}", headers=ALICE)
