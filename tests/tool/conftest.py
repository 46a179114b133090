"""Backends the file-tool tests run over: LocalBackend, a real Bubblewrap sandbox and a Docker
container (podman here; see the ``docker_image`` fixture in tests/conftest.py).

The container bind-mounts the test's ``tmp_path`` at the same path, so the files, symlinks and
"outside" directories a test builds on the host are the ones the container sees, and a test
that checks nothing outside the workspace changed checks the host itself."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator

import pytest

from mnemoscope.workspace import (
    BackendBase,
    BubblewrapWorkspace,
    DockerWorkspace,
    LocalBackend,
    WorkspaceBase,
)

REQUIRE = os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1"


def need_bwrap() -> None:
    if shutil.which("bwrap") is None:
        msg = "bubblewrap is not installed (apt-get install bubblewrap)"
        if REQUIRE:
            pytest.fail(msg + " and MNEMOSCOPE_REQUIRE_SERVICES=1 forbids skipping")
        pytest.skip(msg)


@pytest.fixture(params=["local", "bubblewrap", "docker"])
async def file_backend(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[BackendBase]:
    """A backend whose working directory is ``tmp_path / "work"``."""
    work = tmp_path / "work"
    work.mkdir()
    if request.param == "local":
        yield LocalBackend(cwd=str(work))
        return
    ws: WorkspaceBase
    if request.param == "docker":
        ws = DockerWorkspace(
            image=request.getfixturevalue("docker_image"),
            workdir=str(work),
            run_kwargs={"volumes": {str(tmp_path): {"bind": str(tmp_path), "mode": "rw"}}},
        )
    else:
        need_bwrap()
        ws = BubblewrapWorkspace(workdir=str(work))
    await ws.initialize()
    try:
        yield ws.get_backend()
    finally:
        await ws.close()
