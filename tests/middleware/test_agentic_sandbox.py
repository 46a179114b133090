"""The seed's sandbox example (Docker / E2B) and the same flow in a Bubblewrap sandbox."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.agent import Agent
from mnemoscope.memory.markdown._files import render_memory_file
from mnemoscope.middleware import AgenticMemoryMiddleware, ToolResultEvent
from mnemoscope.permission import PermissionMode
from mnemoscope.testing import ScriptedCall, ScriptedChatModel, tool_call
from mnemoscope.tool import Toolkit
from mnemoscope.workspace import (
    BubblewrapWorkspace,
    DockerWorkspace,
    E2BWorkspace,
    WorkspaceBase,
)

REQUIRE = os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1"
NOTE = render_memory_file(
    "Sandbox test",
    "Read when the user asks what they are testing",
    "project",
    "The user is testing long-term memory in a sandbox.\n\n**Why:** they said so.\n\n"
    "**How to apply:** mention the sandbox when asked.",
)


def make_workspace(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> WorkspaceBase:
    if kind == "bubblewrap":
        if shutil.which("bwrap") is None:
            msg = "bubblewrap is not installed (apt-get install bubblewrap)"
            if REQUIRE:
                pytest.fail(msg)
            pytest.skip(msg)
        return BubblewrapWorkspace(workdir=str(tmp_path / "sandbox"))
    if kind == "docker":
        return DockerWorkspace(image=request.getfixturevalue("docker_image"))
    if not os.environ.get("E2B_API_KEY"):
        pytest.skip("E2B_API_KEY is not set; E2B sandboxes need an account")
    return E2BWorkspace()


def select_all(call: ScriptedCall) -> dict[str, Any]:
    manifest = call.text().split("Memory files:")[1]
    return {
        "selected_files": [
            line.split()[2] for line in manifest.splitlines() if line.startswith("- ")
        ]
    }


@pytest.mark.parametrize("kind", ["bubblewrap", "docker", "e2b"])
async def test_seed_sandbox_example_saves_and_recalls(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    workspace = make_workspace(kind, tmp_path, request)
    my_chat_model = ScriptedChatModel(structured={"MemorySelection": [select_all]})

    # ---- the seed's code, imports changed to mnemoscope -------------------------
    await workspace.initialize()

    # Get the sandbox backend.
    backend = workspace.get_backend()
    memory = AgenticMemoryMiddleware(
        workdir=workspace.workdir,
        # Switch to the sandbox environment.
        backend=backend,
    )
    memdir = f"{workspace.workdir}/Memory"
    my_chat_model.queue(
        tool_call("Write", file_path=f"{memdir}/sandbox_test.md", content=NOTE),
        tool_call(
            "Write",
            file_path=f"{memdir}/MEMORY.md",
            content="- [Sandbox test](sandbox_test.md) — what the user is testing\n",
        ),
        "Noted.",
        "You are testing long-term memory in a sandbox.",
    )

    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=my_chat_model,
        toolkit=Toolkit(
            # Sandbox workspace tools include Read / Write / Edit by default.
            tools=await workspace.list_tools(),
        ),
        middlewares=[memory],
    )
    # the seed leaves permissions alone; writes then need approval, so this test
    # accepts edits to let the scripted model save
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS

    try:
        events = [
            e
            async for e in agent.reply_stream(
                "Remember that I am testing long-term memory in a sandbox."
            )
        ]
        # -------------------------------------------------------------------------
        results = [e.result for e in events if isinstance(e, ToolResultEvent)]
        assert [r.state for r in results] == ["success", "success"], [
            r.output_text() for r in results
        ]
        new_agent = Agent(
            name="assistant",
            system_prompt="You are a helpful assistant.",
            model=my_chat_model,
            toolkit=Toolkit(tools=await workspace.list_tools()),
            # the default retrieval_wait (1 s) is a latency budget: on a loaded machine a
            # scan through the sandbox can take longer, and the reply then goes on without
            # the hint; the test waits for the selection so that it checks its content
            middlewares=[
                AgenticMemoryMiddleware(
                    workdir=workspace.workdir, backend=backend, retrieval_wait=60
                )
            ],
        )
        await new_agent.reply("What am I testing?")
        last = my_chat_model.calls[-1]
        assert "- [Sandbox test](sandbox_test.md)" in last.system_prompt
        hints = [b.hint for m in last.messages for b in m.content if b.type == "hint"]
        assert len(hints) == 1 and "testing long-term memory in a sandbox" in hints[0]
        text = await backend.read_text(f"{memdir}/sandbox_test.md")
        assert text == NOTE
    finally:
        await workspace.close()
