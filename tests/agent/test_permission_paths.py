"""The paths an ``ask_callback`` is shown resolve like the decision does (issue 12 review).

``PermissionRequest.paths`` came from ``tool.permission_paths(tool_input)``, which had no
context, so a relative path showed up resolved against the backend's cwd while the
decision (and the operation) used ``PermissionContext.cwd``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mnemoscope.agent import Agent
from mnemoscope.permission import PermissionContext, PermissionRequest
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import (
    Glob,
    PathAccess,
    Read,
    ToolBase,
    ToolContext,
    Toolkit,
    ToolResult,
    Write,
)
from mnemoscope.tool._base import permission_paths_of
from mnemoscope.workspace import LocalBackend


def dirs(tmp_path: Path) -> tuple[Path, Path]:
    backend_cwd, agent_cwd = tmp_path / "backend", tmp_path / "agent"
    backend_cwd.mkdir()
    agent_cwd.mkdir()
    return backend_cwd, agent_cwd


async def test_ask_callback_sees_relative_paths_against_the_permission_cwd(tmp_path: Path) -> None:
    backend_cwd, agent_cwd = dirs(tmp_path)
    asked: list[PermissionRequest] = []

    async def approve(request: PermissionRequest) -> bool:
        asked.append(request)
        return True

    model = ScriptedChatModel([tool_call("Write", file_path="notes.txt", content="hi\n"), "ok"])
    agent = Agent(
        name="a",
        system_prompt="s",
        model=model,
        toolkit=Toolkit([Write(LocalBackend(cwd=str(backend_cwd)))]),
    )
    agent.state.permission_context.cwd = str(agent_cwd)
    agent.state.permission_context.ask_callback = approve
    await asyncio.wait_for(agent.reply("write"), 20)
    # a write inside the working directory asks in the default mode
    assert [r.paths for r in asked] == [[str(agent_cwd / "notes.txt")]]
    assert (agent_cwd / "notes.txt").read_text() == "hi\n"  # where the request said
    assert not (backend_cwd / "notes.txt").exists()


def test_file_tools_resolve_permission_paths_with_the_context(tmp_path: Path) -> None:
    backend_cwd, agent_cwd = dirs(tmp_path)
    backend = LocalBackend(cwd=str(backend_cwd))
    ctx = ToolContext(permission_context=PermissionContext(cwd=str(agent_cwd)))
    read = Read(backend)
    assert read.permission_paths(read.Input(file_path="a.md"), ctx) == [
        PathAccess(str(agent_cwd / "a.md"), "read")
    ]
    glob = Glob(backend)
    assert glob.permission_paths(glob.Input(pattern="*.md"), ctx) == [
        PathAccess(str(agent_cwd), "read")
    ]
    # without a context: the backend's cwd, as before
    assert read.permission_paths(read.Input(file_path="a.md")) == [
        PathAccess(str(backend_cwd / "a.md"), "read")
    ]
    # the paths shown are the ones the check decides on
    tool_input = read.Input(file_path="a.md")
    assert read.permission_paths(tool_input, ctx) == read._paths(tool_input, ctx)


class _In(BaseModel):
    path: str


class _Old(ToolBase):
    """An override written before ``ctx`` existed."""

    name = "old"
    Input = _In

    def permission_paths(self, tool_input: _In) -> list[PathAccess]:  # type: ignore[override]
        return [PathAccess(tool_input.path, "write")]

    async def call(self, tool_input: Any, ctx: ToolContext) -> ToolResult:
        return ToolResult()


class _KeywordOnly(_Old):
    name = "kw"

    def permission_paths(
        self, tool_input: _In, *, ctx: ToolContext | None = None
    ) -> list[PathAccess]:  # type: ignore[override]
        assert ctx is not None
        return [PathAccess(f"{ctx.tool_use_id}:{tool_input.path}", "write")]


class _OtherName(_Old):
    name = "other"

    def permission_paths(
        self, tool_input: _In, context: ToolContext | None = None
    ) -> list[PathAccess]:  # type: ignore[override]
        assert context is not None
        return [PathAccess(f"{context.tool_use_id}:{tool_input.path}", "write")]


def test_permission_paths_of_supports_old_and_new_signatures() -> None:
    ctx = ToolContext(tool_use_id="t1")
    tool_input = _In(path="p")
    assert permission_paths_of(_Old(), tool_input, ctx) == [PathAccess("p", "write")]
    assert permission_paths_of(_KeywordOnly(), tool_input, ctx) == [PathAccess("t1:p", "write")]
    assert permission_paths_of(_OtherName(), tool_input, ctx) == [PathAccess("t1:p", "write")]
