"""``mnemoscope demo``: the three memory layers, offline, step by step.

The model is scripted (:class:`~mnemoscope.testing.ScriptedChatModel` replays canned
replies and tool calls), so the run needs no LLM, key or network and is the same every
time; everything else is real:

* **Session (short-term)**: agent two keeps its conversation in an SQLite file
  (``<workdir>/session.db`` through ``AsyncSQLAlchemyMemory``, the ``sql`` extra); a second
  run with the same ``--workdir`` resumes it.
* **Agentic memory**: agent one saves two memories with ``Write`` (file first, then its
  line in ``MEMORY.md``); agent two, created afresh on the same workdir, gets the index in
  its system prompt and both memories injected as a hint before its model call.
* **Native long-term store**: both agents run ``LongTermMemoryMiddleware`` over
  ``LocalLongTermMemory(<workdir>/ltm.db)`` with the hash embedder of
  :mod:`mnemoscope.testing` (no model download): agent one's exchange is written back,
  agent two is shown what it retrieves.

Idempotent: files that an earlier run saved are not rewritten (the demo says so), so a
second run prints no tool error.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import Any, TextIO

from mnemoscope.agent import Agent
from mnemoscope.cli._text import aclose_all, plural
from mnemoscope.errors import MissingExtraError
from mnemoscope.memory import LocalLongTermMemory, MemoryBase
from mnemoscope.memory.markdown import render_memory_file
from mnemoscope.middleware import (
    AgenticMemoryMiddleware,
    HintInjectedEvent,
    LongTermMemoryMiddleware,
    MemoryEvent,
    MiddlewareBase,
    ReplyEndEvent,
    ToolResultEvent,
    ToolUseEvent,
)
from mnemoscope.permission import AdditionalWorkingDirectory, PermissionMode
from mnemoscope.testing import HashEmbeddingModel, ScriptedCall, ScriptedChatModel, tool_call
from mnemoscope.tool import Edit, Read, Toolkit, Write

FIRST = "Remember that I live in Hangzhou and prefer concise Chinese answers."
SECOND = "Do you remember my location and answer style preference?"
USER_ID = "demo-user"
SESSION_ID = "demo"

SAVED = (
    "好的，我记住了：你住在杭州，喜欢简洁的中文回答。\n"  # noqa: RUF001
    "(English: OK, I will remember: you live in Hangzhou and like concise answers in Chinese.)"
)
ALREADY = (
    "我已经记得：你住在杭州，喜欢简洁的中文回答。\n"  # noqa: RUF001
    "(English: I already remember that: you live in Hangzhou and like concise Chinese answers.)"
)
RECALLED = (
    "记得：你住在杭州，偏好简洁的中文回答。\n"  # noqa: RUF001
    "(English: Yes: you live in Hangzhou and prefer concise answers in Chinese.)"
)

PROFILE = render_memory_file(
    "User profile",
    "Read when an answer depends on where the user lives",
    "user",
    "The user lives in Hangzhou, China.",
)
STYLE = render_memory_file(
    "Answer style",
    "Read before choosing the language or length of any answer",
    "feedback",
    "Answer in concise Chinese.\n\n**Why:** the user asked for short answers in Chinese."
    "\n\n**How to apply:** every answer, unless the user asks otherwise.",
)
INDEX_LINES = {
    "user_profile.md": "- [User profile](user_profile.md) — where the user lives\n",
    "feedback_answer_style.md": (
        "- [Answer style](feedback_answer_style.md) — language and length of answers\n"
    ),
}


def _select(call: ScriptedCall) -> dict[str, Any]:
    manifest = call.text().split("Memory files:")[1]
    names = [ln.split()[2] for ln in manifest.splitlines() if ln.startswith("- ")]
    return {"selected_files": names}


def _plan(memdir: str) -> tuple[list[Any], list[str]]:
    """Agent one's tool calls, skipping what an earlier run already saved, and notes."""
    calls: list[Any] = []
    notes: list[str] = []
    for name, content in (("user_profile.md", PROFILE), ("feedback_answer_style.md", STYLE)):
        path = os.path.join(memdir, name)
        if os.path.exists(path):
            notes.append(f"{name} already exists (an earlier run saved it): not rewritten")
        else:
            calls.append(tool_call("Write", file_path=path, content=content))
    index_path = os.path.join(memdir, "MEMORY.md")
    index = _read(index_path) if os.path.exists(index_path) else ""
    missing = [line for name, line in INDEX_LINES.items() if f"({name})" not in index]
    if not missing:
        notes.append("MEMORY.md already lists both memories: not rewritten")
    elif not index.strip():
        calls.append(tool_call("Write", file_path=index_path, content="".join(missing)))
    else:  # keep what is there, add the missing lines (Read first: Write requires it)
        calls.append(tool_call("Read", file_path=index_path))
        text = index if index.endswith("\n") else index + "\n"
        calls.append(tool_call("Write", file_path=index_path, content=text + "".join(missing)))
    return calls, notes


async def _play(agent: Agent, text: str, out: TextIO) -> None:
    out.write(f"\nuser > {text}\n")
    tool = ""
    async for event in agent.reply_stream(text):
        if isinstance(event, ToolUseEvent):
            tool = event.tool_use.name
            path = event.tool_use.input.get("file_path", "")
            out.write(f"  [tool] {event.tool_use.name} {path}\n")
        elif isinstance(event, ToolResultEvent):
            result = event.result.output_text().strip()
            if tool == "Read":
                result = result.splitlines()[0] + " ..." if result else result
            out.write(f"  [result:{event.result.state}] {result}\n")
        elif isinstance(event, HintInjectedEvent):
            out.write("  [hint injected before the model call]\n")
        elif isinstance(event, MemoryEvent):
            files = event.data.get("files", "")
            out.write(f"  [{event.source}:{event.action}] {event.message} {files}".rstrip() + "\n")
        elif isinstance(event, ReplyEndEvent):
            reply = event.msg.get_text_content().replace("\n", "\n" + " " * (len(agent.name) + 3))
            out.write(f"{agent.name} > {reply}\n")


def _assistant(
    model: ScriptedChatModel, middlewares: list[MiddlewareBase], memory: MemoryBase | None = None
) -> Agent:
    """The demo's agent: the file tools and the memory layers given."""
    return Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit()]),
        middlewares=middlewares,
        memory=memory,
    )


def _session(workdir: str) -> tuple[MemoryBase | None, str]:
    path = os.path.join(workdir, "session.db")
    try:
        from mnemoscope.memory import AsyncSQLAlchemyMemory

        memory = AsyncSQLAlchemyMemory(f"sqlite+aiosqlite:///{path}", session_id=SESSION_ID)
    except MissingExtraError as exc:
        return None, f"skipped ({exc})"
    return memory, f"{path} (SQLite, session {SESSION_ID!r})"


async def run_demo(out: TextIO, workdir: str | None = None) -> int:
    """Play the scenario, printing every step; returns the exit status (0)."""
    workdir = await asyncio.to_thread(_prepare, workdir)
    ltm_path = os.path.join(workdir, "ltm.db")
    store = LocalLongTermMemory(ltm_path, embedding_model=HashEmbeddingModel())
    session, session_text = _session(workdir)
    agentic = AgenticMemoryMiddleware(workdir=workdir)
    middlewares: list[MiddlewareBase] = [agentic]
    try:
        out.write(
            "mnemoscope demo: the model is SCRIPTED (ScriptedChatModel replays canned replies "
            "and tool calls),\nso no LLM, key or network is needed; the memory layers are real.\n"
            f"\nworkdir: {workdir}\n"
            f"  session (short-term):   {session_text}\n"
            f"  agentic memory:         {agentic.memory_dir} (Markdown files + MEMORY.md)\n"
            f"  native long-term store: {ltm_path} (BM25 + vectors; hash embedder, "
            "no download)\n"
        )
        calls, notes = await asyncio.to_thread(_plan, agentic.memory_dir)
        model = ScriptedChatModel(
            [*calls, SAVED if calls else ALREADY, RECALLED],
            structured={"MemorySelection": [_select] * 8},
        )
        one_ltm = LongTermMemoryMiddleware(store, user_id=USER_ID, mode="static_control")
        middlewares.append(one_ltm)
        agent = _assistant(model, [agentic, one_ltm])
        agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
        agent.state.permission_context.working_directories[workdir] = AdditionalWorkingDirectory(
            path=workdir, source="demo"
        )
        out.write("\n=== 1. agent one saves memories (agentic files + native store) ===\n")
        for note in notes:
            out.write(f"  [demo] {note}\n")
        await _play(agent, FIRST, out)

        out.write("\n=== files on disk ===\n")
        scan = await agentic.store.scan()
        for name in ["MEMORY.md", *(f.filename for f in scan.files)]:
            path = os.path.join(agentic.memory_dir, name)
            text = await asyncio.to_thread(_read, path)
            out.write(f"--- {path}\n{text}")

        before = await session.size() if session is not None else 0
        two_agentic = AgenticMemoryMiddleware(workdir=workdir)
        two_ltm = LongTermMemoryMiddleware(store, user_id=USER_ID, mode="static_control")
        middlewares += [two_agentic, two_ltm]
        new_agent = _assistant(model, [two_agentic, two_ltm], session)
        out.write("\n=== 2. agent two, recreated on the same workdir ===\n")
        if session is not None:
            resumed = "resumed: " if before else "new session: "
            out.write(f"  [session] {resumed}{before} earlier messages in session {SESSION_ID!r}\n")
        await _play(new_agent, SECOND, out)
        _explain(model, out)
        if session is not None:
            after = await session.size()
            out.write(
                f"\n=== session {SESSION_ID!r} in {workdir}/session.db ===\n"
                f"{before} messages before this run, {after} now "
                f"({'resumed' if before else 'created'}; run again with --workdir {workdir} "
                "to resume it)\n"
            )
        n = len(await store.list(user_id=USER_ID))
        out.write(
            f"\nnative store: {plural(n, 'memory')} of {USER_ID!r} in {ltm_path}\n"
            f"\ntry:\n  mnemoscope memory ls {workdir}\n"
            f"  mnemoscope ltm ls {ltm_path} --user {USER_ID}\n"
            f'  mnemoscope ltm search {ltm_path} "where does the user live" --user {USER_ID}\n'
            f"  mnemoscope demo --workdir {workdir}     # again: everything is resumed\n"
        )
    finally:
        await aclose_all(*middlewares, session, store)
    return 0


def _explain(model: ScriptedChatModel, out: TextIO) -> None:
    last = [c for c in model.calls if c.tool_choice != "MemorySelection"][-1]
    prompt = last.system_prompt
    out.write("\n=== index section of agent two's system prompt ===\n")
    out.write(prompt[prompt.index("## MEMORY.md") :] + "\n")
    out.write("\n=== hint injected into agent two's model input (agentic memory) ===\n")
    for msg in last.messages:
        for block in msg.content:
            if block.type == "hint":
                out.write(block.hint + "\n")
    out.write("\n=== what the native store retrieved for agent two ===\n")
    shown = [m.get_text_content() for m in last.messages if m.name == "memory"]
    out.write(("\n".join(shown) or "(nothing)") + "\n")


def _prepare(workdir: str | None) -> str:
    if workdir is None:
        return tempfile.mkdtemp(prefix="mnemoscope-demo-")
    os.makedirs(workdir, exist_ok=True)
    return os.path.abspath(workdir)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()
