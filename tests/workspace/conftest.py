"""The backend contract suite runs over every backend.

Local and Bubblewrap always run (Bubblewrap skips only without ``bwrap``; it fails under
MNEMOSCOPE_REQUIRE_SERVICES=1). Docker needs an engine and an image (the ``docker_image``
fixture in tests/conftest.py); E2B needs ``E2B_API_KEY``; both skip with that reason otherwise.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from mnemoscope.workspace import (
    BackendBase,
    BubblewrapWorkspace,
    DockerWorkspace,
    E2BWorkspace,
    LocalBackend,
    WorkspaceBase,
)

REQUIRE = os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1"


@dataclass
class BackendCase:
    name: str
    backend: BackendBase
    workdir: str
    workspace: WorkspaceBase | None = None


@pytest.fixture(params=["local", "bubblewrap", "docker", "e2b"])
async def case(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[BackendCase]:
    work = tmp_path / "work"
    work.mkdir()
    if request.param == "local":
        yield BackendCase("local", LocalBackend(cwd=str(work)), str(work))
        return
    ws: WorkspaceBase
    if request.param == "bubblewrap":
        if shutil.which("bwrap") is None:
            msg = "bubblewrap is not installed (apt-get install bubblewrap)"
            if REQUIRE:
                pytest.fail(msg)
            pytest.skip(msg)
        ws = BubblewrapWorkspace(workdir=str(work))
    elif request.param == "docker":
        # the test's tmp_path is bind-mounted at the same path, so files a test makes on the
        # host side are the ones the container sees
        ws = DockerWorkspace(
            image=request.getfixturevalue("docker_image"),
            workdir=str(work),
            run_kwargs={"volumes": {str(tmp_path): {"bind": str(tmp_path), "mode": "rw"}}},
        )
    else:
        if not os.environ.get("E2B_API_KEY"):
            pytest.skip("E2B_API_KEY is not set; E2B sandboxes need an account")
        ws = E2BWorkspace()
    await ws.initialize()
    try:
        yield BackendCase(request.param, ws.get_backend(), ws.workdir, ws)
    finally:
        await ws.close()
