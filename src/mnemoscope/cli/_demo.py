"""``mnemoscope demo``: the agentic-memory scenario of the docs, offline, step by step.

Agent one is told where the user lives and how they like answers, and saves two memories
with Write (file first, then its line in ``MEMORY.md``). Agent two is created afresh on the
same workdir: its system prompt carries the index, and the retrieval started with its
reply injects both memories as a hint before its only model call. A scripted model plays
the LLM, so the run needs no key and is the same every time.
"""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any, TextIO

from mnemoscope.agent import Agent
from mnemoscope.middleware import (
    AgenticMemoryMiddleware,
    HintInjectedEvent,
    MemoryEvent,
    ReplyEndEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from mnemoscope.middleware._agentic_files import render_memory_file
from mnemoscope.permission import AdditionalWorkingDirectory, PermissionMode
from mnemoscope.testing import ScriptedCall, ScriptedChatModel, tool_call
from mnemoscope.tool import Edit, Read, Toolkit, Write

FIRST = "Remember that I live in Hangzhou and prefer concise Chinese answers."
SECOND = "Do you remember my location and answer style preference?"


def _script(memdir: str) -> ScriptedChatModel:
    profile = render_memory_file(
        "User profile",
        "Read when an answer depends on where the user lives",
        "user",
        "The user lives in Hangzhou, China.",
    )
    style = render_memory_file(
        "Answer style",
        "Read before choosing the language or length of any answer",
        "feedback",
        "Answer in concise Chinese.\n\n**Why:** the user asked for short answers in Chinese."
        "\n\n**How to apply:** every answer, unless the user asks otherwise.",
    )
    index = (
        "- [User profile](user_profile.md) — where the user lives\n"
        "- [Answer style](feedback_answer_style.md) — language and length of answers\n"
    )

    def select(call: ScriptedCall) -> dict[str, Any]:
        manifest = call.text().split("Memory files:")[1]
        names = [ln.split()[2] for ln in manifest.splitlines() if ln.startswith("- ")]
        return {"selected_files": names}

    return ScriptedChatModel(
        [
            tool_call("Write", file_path=f"{memdir}/user_profile.md", content=profile),
            tool_call("Write", file_path=f"{memdir}/feedback_answer_style.md", content=style),
            tool_call("Write", file_path=f"{memdir}/MEMORY.md", content=index),
            "好的，我记住了：你住在杭州，喜欢简洁的中文回答。",  # noqa: RUF001
            "记得：你住在杭州，偏好简洁的中文回答。",  # noqa: RUF001
        ],
        structured={"MemorySelection": [select, select]},
    )


async def _play(agent: Agent, text: str, out: TextIO) -> None:
    out.write(f"\nuser > {text}\n")
    async for event in agent.reply_stream(text):
        if isinstance(event, ToolUseEvent):
            path = event.tool_use.input.get("file_path", "")
            out.write(f"  [tool] {event.tool_use.name} {path}\n")
        elif isinstance(event, ToolResultEvent):
            out.write(f"  [result:{event.result.state}] {event.result.output_text()}\n")
        elif isinstance(event, HintInjectedEvent):
            out.write("  [hint injected before the model call]\n")
        elif isinstance(event, MemoryEvent):
            out.write(f"  [memory:{event.action}] {event.message} {event.data.get('files', '')}\n")
        elif isinstance(event, ReplyEndEvent):
            out.write(f"{agent.name} > {event.msg.get_text_content()}\n")


async def run_demo(out: TextIO, workdir: str | None = None) -> int:
    """Play the scenario, printing every step; returns the exit status (0)."""
    tmp = None
    if workdir is None:
        tmp = await asyncio.to_thread(tempfile.mkdtemp, prefix="mnemoscope-demo-")
        workdir = tmp
    memory = AgenticMemoryMiddleware(workdir=workdir)
    model = _script(memory.memory_dir)
    out.write(f"workdir: {workdir}\nmemory:  {memory.memory_dir}\n")

    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit()]),
        middlewares=[memory],
    )
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    agent.state.permission_context.working_directories[workdir] = AdditionalWorkingDirectory(
        path=workdir, source="demo"
    )
    out.write("\n=== agent one saves memories ===")
    await _play(agent, FIRST, out)

    out.write("\n=== files on disk ===\n")
    scan = await memory.store.scan()
    for name in ["MEMORY.md", *(f.filename for f in scan.files)]:
        path = f"{memory.memory_dir}/{name}"
        text = await asyncio.to_thread(_read, path)
        out.write(f"--- {path}\n{text}")

    new_agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit()]),
        middlewares=[AgenticMemoryMiddleware(workdir=workdir)],
    )
    out.write("\n=== agent two, recreated on the same workdir ===")
    await _play(new_agent, SECOND, out)

    last = [c for c in model.calls if c.tool_choice != "MemorySelection"][-1]
    prompt = last.system_prompt
    out.write("\n=== index section of agent two's system prompt ===\n")
    out.write(prompt[prompt.index("## MEMORY.md") :] + "\n")
    out.write("\n=== hint injected into agent two's model input ===\n")
    for msg in last.messages:
        for block in msg.content:
            if block.type == "hint":
                out.write(block.hint + "\n")
    if tmp is not None:
        out.write(
            f"\n(the memory files stay in {workdir}; "
            f"try: mnemoscope memory ls --workdir {workdir})\n"
        )
    return 0


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()
