"""Backends the file-tool tests run over: LocalBackend and a real Bubblewrap sandbox."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator

import pytest

from mnemoscope.workspace import BackendBase, BubblewrapWorkspace, LocalBackend

REQUIRE = os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1"


def need_bwrap() -> None:
    if shutil.which("bwrap") is None:
        msg = "bubblewrap is not installed (apt-get install bubblewrap)"
        if REQUIRE:
            pytest.fail(msg + " and MNEMOSCOPE_REQUIRE_SERVICES=1 forbids skipping")
        pytest.skip(msg)


@pytest.fixture(params=["local", "bubblewrap"])
async def file_backend(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[BackendBase]:
    """A backend whose working directory is ``tmp_path / "work"``."""
    work = tmp_path / "work"
    work.mkdir()
    if request.param == "local":
        yield LocalBackend(cwd=str(work))
        return
    need_bwrap()
    ws = BubblewrapWorkspace(workdir=str(work))
    await ws.initialize()
    try:
        yield ws.get_backend()
    finally:
        await ws.close()
