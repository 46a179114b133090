"""AgenticMemoryMiddleware driven through real agents, tools and files (scripted model)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.agent import Agent
from mnemoscope.errors import ModelCallError, UserError
from mnemoscope.memory.markdown._files import render_memory_file
from mnemoscope.message import UserMsg
from mnemoscope.middleware import (
    AgenticMemoryMiddleware,
    HintInjectedEvent,
    MemoryEvent,
    ReplyContext,
    ToolResultEvent,
)
from mnemoscope.permission import AdditionalWorkingDirectory, PermissionMode
from mnemoscope.testing import ScriptedCall, ScriptedChatModel, tool_call
from mnemoscope.tool import Edit, Read, Toolkit, Write

SELECTION = "MemorySelection"

PROFILE = render_memory_file(
    "User profile",
    "Read when the answer depends on where the user lives",
    "user",
    "The user lives in Hangzhou.",
)
STYLE = render_memory_file(
    "Answer style",
    "Read before choosing the language or length of an answer",
    "feedback",
    "Answer in concise Chinese.\n\n**Why:** the user asked for it.\n\n"
    "**How to apply:** every answer.",
)
PET = render_memory_file(
    "Pet", "Read when the user's cat or pets come up", "user", "The cat is called Mochi."
)
INDEX = (
    "- [User profile](user_profile.md) — where the user lives\n"
    "- [Answer style](feedback_answer_style.md) — language and length of answers\n"
)


def seed_memories(workdir: Path, extra: dict[str, str] | None = None) -> Path:
    memdir = workdir / "Memory"
    memdir.mkdir(parents=True, exist_ok=True)
    (memdir / "user_profile.md").write_text(PROFILE)
    (memdir / "feedback_answer_style.md").write_text(STYLE)
    (memdir / "MEMORY.md").write_text(INDEX)
    for name, text in (extra or {}).items():
        (memdir / name).write_text(text)
    return memdir


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def select(*names: str) -> Any:
    """A scripted selection answer that also checks it was shown a manifest."""

    def answer(call: ScriptedCall) -> dict[str, Any]:
        assert "Memory files:" in call.text()
        return {"selected_files": list(names)}

    return answer


async def retrieval_finished() -> None:
    """Wait until the running reply's retrieval task is done (it is named after its job)."""
    tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("agentic-memory-retrieval")]
    assert tasks, "no retrieval task is running"
    await asyncio.wait(tasks)


def hints_of(call: ScriptedCall) -> list[str]:
    return [b.hint for m in call.messages for b in m.content if b.type == "hint"]


def main_calls(model: ScriptedChatModel) -> list[ScriptedCall]:
    return [c for c in model.calls if c.tool_choice != SELECTION]


def make_agent(model: ScriptedChatModel, mw: AgenticMemoryMiddleware, **kw: Any) -> Agent:
    return Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit()]),
        middlewares=[mw],
        **kw,
    )


# ------------------------------------------------------------------ the seed's flow
async def test_seed_flow_first_agent_saves_second_agent_recalls(tmp_path: Path) -> None:
    workdir = str(tmp_path / "ltm_demo")
    memdir = f"{workdir}/Memory"
    my_chat_model = ScriptedChatModel(
        [
            tool_call(
                "Write",
                file_path=f"{memdir}/user_profile.md",
                content=PROFILE,
            ),
            tool_call("Write", file_path=f"{memdir}/feedback_answer_style.md", content=STYLE),
            # step two of the documented save: the pre-created, empty index, first try
            tool_call(
                "Write",
                file_path=f"{memdir}/MEMORY.md",
                content="- [User profile](user_profile.md) — where the user lives\n",
            ),
            tool_call(
                "Edit",
                file_path=f"{memdir}/MEMORY.md",
                old_string="- [User profile](user_profile.md) — where the user lives",
                new_string="- [User profile](user_profile.md) — where the user lives\n"
                "- [Answer style](feedback_answer_style.md) — language and length of answers",
            ),
            "好的，我记住了。",
            "你住在杭州，喜欢简洁的中文回答。",
        ],
        structured={SELECTION: [select("user_profile.md", "feedback_answer_style.md")]},
    )

    # ---- the seed's code, imports changed to mnemoscope -------------------------
    memory = AgenticMemoryMiddleware(workdir=workdir)

    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=my_chat_model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit()]),
        middlewares=[memory],
    )

    # Optional: allow the Write tool in this example to write into workdir.
    # In production, configure permissions according to your security policy.
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    agent.state.permission_context.working_directories[workdir] = AdditionalWorkingDirectory(
        path=workdir, source="long-term-memory-demo"
    )

    first_events = [
        e
        async for e in agent.reply_stream(
            "Remember that I live in Hangzhou and prefer concise Chinese answers."
        )
    ]

    # Recreate an agent. Reusing the same workdir reuses the same Markdown memories.
    new_agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=my_chat_model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit()]),
        middlewares=[AgenticMemoryMiddleware(workdir=workdir)],
    )

    answer = await new_agent.reply("Do you remember my location and answer style preference?")
    # -----------------------------------------------------------------------------

    results = [e.result for e in first_events if isinstance(e, ToolResultEvent)]
    assert [r.state for r in results] == ["success"] * 4, [r.output_text() for r in results]
    index = read(f"{memdir}/MEMORY.md")
    assert index.count("\n") == 2 and "(feedback_answer_style.md)" in index
    assert read(f"{memdir}/user_profile.md") == PROFILE

    last = main_calls(my_chat_model)[-1]
    # the index line is in the second agent's system prompt ...
    assert "- [User profile](user_profile.md) — where the user lives" in last.system_prompt
    # ... and the retrieved files came in as a hint, in a reply of a single model call
    (hint,) = hints_of(last)
    assert "The user lives in Hangzhou." in hint and "Answer in concise Chinese." in hint
    assert answer.get_text_content() == "你住在杭州，喜欢简洁的中文回答。"


async def test_second_agent_needs_no_permission_setup_to_read(tmp_path: Path) -> None:
    memdir = seed_memories(tmp_path)
    model = ScriptedChatModel(
        [
            tool_call("Read", file_path=str(memdir / "user_profile.md")),
            tool_call("Write", file_path=str(memdir / "new.md"), content="x"),
            "done",
        ],
        structured={SELECTION: [select()]},
    )
    agent = make_agent(model, AgenticMemoryMiddleware(workdir=str(tmp_path)))
    events = [e async for e in agent.reply_stream("What do you know about me?")]
    read, write = [e.result for e in events if isinstance(e, ToolResultEvent)]
    assert read.state == "success" and "Hangzhou" in read.output_text()
    # writes follow the permission mode: DEFAULT asks, and with no one to ask it is denied
    assert write.state == "denied"
    assert not (memdir / "new.md").exists()


# --------------------------------------------------------------- retrieval timing
async def test_one_step_reply_gets_the_hint_when_retrieval_is_fast(tmp_path: Path) -> None:
    seed_memories(tmp_path)

    async def slowish(call: ScriptedCall) -> dict[str, Any]:
        await asyncio.sleep(0.01)  # finishes within retrieval_wait
        return {"selected_files": ["user_profile.md"]}

    model = ScriptedChatModel(["Hangzhou."], structured={SELECTION: [slowish]})
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), retrieval_wait=30)
    events = [e async for e in make_agent(model, mw).reply_stream("Where do I live?")]
    (call,) = main_calls(model)
    (hint,) = hints_of(call)
    assert "The user lives in Hangzhou." in hint and "concise Chinese" not in hint
    retrieved = [e for e in events if isinstance(e, MemoryEvent) and e.action == "retrieve"]
    assert retrieved[0].data["files"] == ["user_profile.md"]


async def test_slow_retrieval_does_not_stall_the_reply(tmp_path: Path) -> None:
    seed_memories(tmp_path)
    never = asyncio.Event()
    cancelled = asyncio.Event()

    async def stuck(call: ScriptedCall) -> dict[str, Any]:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {"selected_files": []}

    model = ScriptedChatModel(["No memories needed."], structured={SELECTION: [stuck]})
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), retrieval_wait=0.05)
    # the guard only catches a hang; the reply must finish although retrieval never does
    msg = await asyncio.wait_for(make_agent(model, mw).reply("Where do I live?"), timeout=60)
    assert msg.get_text_content() == "No memories needed."
    assert hints_of(main_calls(model)[0]) == []
    assert cancelled.is_set(), "the reply's retrieval task must be cancelled when it ends"


async def test_retrieval_not_ready_at_first_step_is_injected_at_a_later_one(tmp_path: Path) -> None:
    seed_memories(tmp_path)
    release = asyncio.Event()

    async def gated(call: ScriptedCall) -> dict[str, Any]:
        await release.wait()
        return {"selected_files": ["user_profile.md"]}

    async def first_step(call: ScriptedCall) -> Any:
        release.set()  # retrieval finishes during the first step
        await retrieval_finished()
        return tool_call("Read", file_path=str(tmp_path / "Memory" / "MEMORY.md"))

    model = ScriptedChatModel(
        [
            first_step,
            "Hangzhou.",
        ],
        structured={SELECTION: [gated]},
    )
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), retrieval_wait=0)
    await make_agent(model, mw).reply("Where do I live?")
    first, second = main_calls(model)
    assert hints_of(first) == []
    (hint,) = hints_of(second)
    assert "Hangzhou" in hint


async def test_hint_skips_files_already_read_and_is_never_repeated(tmp_path: Path) -> None:
    memdir = seed_memories(tmp_path)
    release = asyncio.Event()

    async def gated(call: ScriptedCall) -> dict[str, Any]:
        await release.wait()
        return {"selected_files": ["user_profile.md", "feedback_answer_style.md"]}

    def read_profile(call: ScriptedCall) -> Any:
        return tool_call("Read", file_path=str(memdir / "user_profile.md"))

    async def read_index(call: ScriptedCall) -> Any:
        release.set()
        await retrieval_finished()
        return tool_call("Read", file_path=str(memdir / "MEMORY.md"))

    model = ScriptedChatModel(
        [read_profile, read_index, tool_call("Read", file_path=str(memdir / "MEMORY.md")), "ok"],
        structured={SELECTION: [gated]},
    )
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), retrieval_wait=0)
    events = [e async for e in make_agent(model, mw).reply_stream("Where do I live?")]
    calls = main_calls(model)
    all_hints = [h for c in calls for h in hints_of(c)]
    # the hint appears in the transcript once, from the third call on
    assert [len(hints_of(c)) for c in calls] == [0, 0, 1, 1]
    hint = hints_of(calls[2])[0]
    assert "concise Chinese" in hint
    assert "lives in Hangzhou" not in hint, "the model already read user_profile.md"
    injected = [e for e in events if isinstance(e, HintInjectedEvent)]
    assert len(injected) == 1 and len(set(all_hints)) == 1
    (retrieved,) = [e for e in events if isinstance(e, MemoryEvent) and e.action == "retrieve"]
    assert retrieved.data["skipped_already_seen"] == ["user_profile.md"]


async def test_concurrent_replies_through_one_middleware_keep_their_own_retrieval(
    tmp_path: Path,
) -> None:
    seed_memories(tmp_path)
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), retrieval_wait=30)
    both_started = asyncio.Barrier(2)

    def by_query(call: ScriptedCall) -> Any:
        async def answer() -> dict[str, Any]:
            await both_started.wait()  # both retrievals are in flight at the same time
            text = call.text()
            wanted = (
                "user_profile.md"
                if "live" in text.split("Memory files:")[0]
                else ("feedback_answer_style.md")
            )
            return {"selected_files": [wanted]}

        return answer()

    model_a = ScriptedChatModel(["A"], structured={SELECTION: [by_query]})
    model_b = ScriptedChatModel(["B"], structured={SELECTION: [by_query]})
    agent_a, agent_b = make_agent(model_a, mw), make_agent(model_b, mw)
    await asyncio.gather(
        agent_a.reply("Where do I live?"), agent_b.reply("How should you style answers?")
    )
    (hint_a,) = hints_of(main_calls(model_a)[0])
    (hint_b,) = hints_of(main_calls(model_b)[0])
    assert "Hangzhou" in hint_a and "concise Chinese" not in hint_a
    assert "concise Chinese" in hint_b and "Hangzhou" not in hint_b


# ------------------------------------------------------------------ selection modes
async def test_local_selection_uses_the_ranker_and_no_model_call(tmp_path: Path) -> None:
    seed_memories(tmp_path, {"pet.md": PET})
    model = ScriptedChatModel(["Hangzhou."])
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), selection="local")
    events = [e async for e in make_agent(model, mw).reply_stream("Which city do I live in?")]
    assert [c.tool_choice for c in model.calls] == [None]
    (retrieved,) = [e for e in events if isinstance(e, MemoryEvent) and e.action == "retrieve"]
    assert retrieved.data["mode"] == "local"
    assert retrieved.data["files"][0] == "user_profile.md"
    assert "pet.md" not in retrieved.data["files"]
    (hint,) = hints_of(model.calls[0])
    assert "Hangzhou" in hint and "Mochi" not in hint


async def test_failed_selection_falls_back_to_the_ranker_and_says_so(tmp_path: Path) -> None:
    seed_memories(tmp_path)

    def broken(call: ScriptedCall) -> Any:
        raise ModelCallError("selection model is down")

    model = ScriptedChatModel(["Hangzhou."], structured={SELECTION: [broken]})
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path))
    events = [e async for e in make_agent(model, mw).reply_stream("Where does the user live?")]
    errors = [e for e in events if isinstance(e, MemoryEvent) and e.action == "error"]
    assert errors and "selection model is down" in errors[0].message
    (hint,) = hints_of(main_calls(model)[0])
    assert "Hangzhou" in hint


async def test_manifest_stays_bounded_with_thousands_of_files(tmp_path: Path) -> None:
    extra = {
        f"note_{i:04d}.md": render_memory_file(
            f"Note {i}", f"Read when discussing topic number {i}", "project", f"Fact {i}."
        )
        for i in range(2000)
    }
    extra["pet.md"] = PET
    seed_memories(tmp_path, extra)
    seen: list[str] = []

    def pick(call: ScriptedCall) -> dict[str, Any]:
        manifest = call.text().split("Memory files:")[1]
        seen.extend(line for line in manifest.splitlines() if line.startswith("- "))
        return {"selected_files": ["pet.md"]}

    model = ScriptedChatModel(["Mochi."], structured={SELECTION: [pick]})
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), manifest_max_files=40)
    await make_agent(model, mw).reply("What is my cat called?")
    assert len(seen) == 40
    assert seen[0].startswith("- [user] pet.md"), "the ranker puts the relevant file first"
    assert "Mochi" in hints_of(main_calls(model)[0])[0]


# ----------------------------------------------------------------- system prompt
async def test_prompt_is_built_once_and_rebuilt_only_when_the_index_changes(
    tmp_path: Path,
) -> None:
    memdir = seed_memories(tmp_path)
    line = "- [Pet](pet.md) — the user's cat"
    model = ScriptedChatModel(
        [
            tool_call("Read", file_path=str(memdir / "user_profile.md")),
            tool_call(
                "Write",
                file_path=str(memdir / "pet.md"),
                content=render_memory_file(
                    "Pet", "Read when pets come up", "user", "A cat, Mochi."
                ),
            ),
            tool_call(
                "Edit",
                file_path=str(memdir / "MEMORY.md"),
                old_string=INDEX.splitlines()[-1],
                new_string=INDEX.splitlines()[-1] + "\n" + line,
            ),
            "saved",
        ],
        structured={SELECTION: [select()]},
    )
    agent = make_agent(model, AgenticMemoryMiddleware(workdir=str(tmp_path)))
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    events = [e async for e in agent.reply_stream("My cat is called Mochi, remember it.")]
    results = [e.result for e in events if isinstance(e, ToolResultEvent)]
    # the Edit of the index worked without a Read: the prompt showed the whole index
    assert [r.state for r in results] == ["success"] * 3, [r.output_text() for r in results]
    prompts = [c.system_prompt for c in main_calls(model)]
    assert prompts[0] == prompts[1] == prompts[2]
    assert line not in prompts[2] and line in prompts[3]


async def test_write_of_an_existing_memory_still_needs_a_read(tmp_path: Path) -> None:
    memdir = seed_memories(tmp_path)
    model = ScriptedChatModel(
        [tool_call("Write", file_path=str(memdir / "user_profile.md"), content="x"), "ok"],
        structured={SELECTION: [select()]},
    )
    agent = make_agent(model, AgenticMemoryMiddleware(workdir=str(tmp_path)))
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    events = [e async for e in agent.reply_stream("hi")]
    (result,) = [e.result for e in events if isinstance(e, ToolResultEvent)]
    assert result.is_error and "has not been read" in result.output_text()


async def test_changed_index_must_be_read_again_before_editing(tmp_path: Path) -> None:
    memdir = seed_memories(tmp_path)

    def someone_else_writes(call: ScriptedCall) -> Any:
        # another process adds a line after this agent's prompt showed the index
        with open(memdir / "MEMORY.md", "a") as f:
            f.write("- [Other](other.md) — written elsewhere\n")
        return tool_call(
            "Write", file_path=str(memdir / "MEMORY.md"), content=INDEX + "- [Mine](mine.md)\n"
        )

    model = ScriptedChatModel([someone_else_writes, "ok"], structured={SELECTION: [select()]})
    agent = make_agent(model, AgenticMemoryMiddleware(workdir=str(tmp_path)))
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    events = [e async for e in agent.reply_stream("hi")]
    (result,) = [e.result for e in events if isinstance(e, ToolResultEvent)]
    assert result.is_error and "changed since" in result.output_text()
    assert "(other.md)" in (memdir / "MEMORY.md").read_text(), "no line was lost"


async def test_truncated_index_names_what_was_left_out(tmp_path: Path) -> None:
    memdir = tmp_path / "Memory"
    memdir.mkdir()
    lines = [f"- [Note {i}](note_{i:03d}.md) — hook {i}" for i in range(300)]
    (memdir / "MEMORY.md").write_text("\n".join(lines) + "\n")
    model = ScriptedChatModel(["ok"], structured={SELECTION: [select()]})
    await make_agent(model, AgenticMemoryMiddleware(workdir=str(tmp_path))).reply("hi")
    prompt = model.calls[-1].system_prompt
    assert lines[199] in prompt and lines[200] not in prompt
    assert "line budget: lines 201-300 of 300 are not shown" in prompt
    assert "Entries left out (100): note_200.md, note_201.md" in prompt and "and 80 more" in prompt

    model = ScriptedChatModel(["ok"], structured={SELECTION: [select()]})
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), index_max_tokens=100)
    await make_agent(model, mw).reply("hi")
    prompt = model.calls[-1].system_prompt
    assert "token budget" in prompt and lines[0] in prompt and lines[50] not in prompt


async def test_index_written_by_the_model_is_not_marked_read_when_truncated(
    tmp_path: Path,
) -> None:
    memdir = tmp_path / "Memory"
    memdir.mkdir()
    (memdir / "MEMORY.md").write_text("".join(f"- [N{i}](n{i}.md)\n" for i in range(10)))
    model = ScriptedChatModel(
        [tool_call("Write", file_path=str(memdir / "MEMORY.md"), content="- [x](x.md)\n"), "ok"],
        structured={SELECTION: [select()]},
    )
    agent = make_agent(model, AgenticMemoryMiddleware(workdir=str(tmp_path), index_max_lines=5))
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    events = [e async for e in agent.reply_stream("hi")]
    (result,) = [e.result for e in events if isinstance(e, ToolResultEvent)]
    # overwriting an index the model only partly saw would drop the hidden lines
    assert result.is_error and "(n9.md)" in (memdir / "MEMORY.md").read_text()


# ----------------------------------------------------------------- bad frontmatter
async def test_invalid_frontmatter_is_reported_to_the_model(tmp_path: Path) -> None:
    memdir = seed_memories(
        tmp_path, {"broken.md": "---\nname: Broken\ntype: diary\n---\nLives in Hangzhou too.\n"}
    )
    model = ScriptedChatModel(
        [
            tool_call("Write", file_path=str(memdir / "sloppy.md"), content="no frontmatter here"),
            "ok",
        ],
        structured={SELECTION: [select("broken.md", "user_profile.md")]},
    )
    agent = make_agent(model, AgenticMemoryMiddleware(workdir=str(tmp_path)))
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    events = [e async for e in agent.reply_stream("Where do I live?")]
    first = main_calls(model)[0]
    assert "broken.md: missing field 'description'; type 'diary' is not one of" in (
        first.system_prompt
    )
    # invalid files are not offered to the selector nor injected
    assert "broken.md" not in model.calls[0].text().split("Memory files:")[1]
    assert "Lives in Hangzhou too" not in hints_of(first)[0]
    (write,) = [e.result for e in events if isinstance(e, ToolResultEvent)]
    assert write.state == "success"
    assert "sloppy.md has invalid memory frontmatter" in write.output_text()
    assert "add a line for sloppy.md" in write.output_text()


async def test_invalid_file_written_between_replies_is_reported_by_a_later_reply(
    tmp_path: Path,
) -> None:
    memdir = seed_memories(tmp_path)
    model = ScriptedChatModel(["ok"] * 3, structured={SELECTION: [select()] * 3})
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path))
    agent = make_agent(model, mw)
    await agent.reply("hi")
    (memdir / "late.md").write_text("written by another program, no frontmatter")
    # this reply's prompt may come from the previous scan; its own scan runs meanwhile
    await agent.reply("hi again")
    await mw.store.settle()
    await agent.reply("and again")
    prompts = [c.system_prompt for c in main_calls(model)]
    assert "late.md" not in prompts[0]
    assert "- late.md: no frontmatter" in prompts[2]


async def test_prompt_catches_up_with_the_replys_own_scan_before_the_next_step(
    tmp_path: Path,
) -> None:
    memdir = seed_memories(tmp_path)
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path))
    agent = make_agent(ScriptedChatModel(["ok"], structured={SELECTION: [select()]}), mw)
    await agent.reply("hi")
    await mw.store.settle()
    (memdir / "late.md").write_text("no frontmatter")
    # a reply whose own scan finishes only after its prompt was built (held by a gate)
    ctx = ReplyContext(agent=agent, input=UserMsg("user", "hi"))
    gate = asyncio.Event()

    async def gated_scan() -> Any:
        await gate.wait()
        return await mw.store.scan()

    ctx.state_for(mw)["scan"] = scan = asyncio.create_task(gated_scan())
    prompt = await mw.on_system_prompt(ctx, "base")
    assert "late.md" not in prompt  # built at once from the previous reply's scan
    assert not await mw.system_prompt_changed(ctx)
    gate.set()
    await scan
    assert await mw.system_prompt_changed(ctx)  # rebuilt before the next step...
    assert "- late.md: no frontmatter" in await mw.on_system_prompt(ctx, "base")
    assert not await mw.system_prompt_changed(ctx)  # ...once


async def test_prompt_needs_no_new_scan_when_nothing_changed(tmp_path: Path) -> None:
    seed_memories(tmp_path, {"broken.md": "no frontmatter"})
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path), retrieval=False)
    model = ScriptedChatModel(["ok"] * 3)
    agent = make_agent(model, mw)
    await agent.reply("hi")  # the cold prompt does not wait for the first scan
    await mw.store.settle()
    scan = mw.store.last_scan
    await agent.reply("hi")
    await mw.store.settle()
    assert mw.store.last_scan is scan  # unchanged directory: the same scan result
    await agent.reply("hi")
    _, second, third = (c.system_prompt for c in model.calls)
    assert second == third and "- broken.md: no frontmatter" in second


# -------------------------------------------------------------------- construction
def test_misconfiguration_names_the_parameter(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="selection"):
        AgenticMemoryMiddleware(workdir=str(tmp_path), selection="vector")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="retrieval_wait"):
        AgenticMemoryMiddleware(workdir=str(tmp_path), retrieval_wait=-1)
    with pytest.raises(UserError, match="index_max_lines"):
        AgenticMemoryMiddleware(workdir=str(tmp_path), index_max_lines=0)


async def test_layout_is_created_at_the_first_reply_and_kept(tmp_path: Path) -> None:
    model = ScriptedChatModel(["ok", "ok"])
    mw = AgenticMemoryMiddleware(workdir=str(tmp_path / "w"))
    agent = make_agent(model, mw)
    assert mw.memory_dir in agent.state.permission_context.working_directories
    await agent.reply("hi")
    index = tmp_path / "w" / "Memory" / "MEMORY.md"
    assert index.read_text() == ""
    index.write_text("- [A](a.md) — kept\n")
    await agent.reply("hi again")
    assert index.read_text() == "- [A](a.md) — kept\n"
    assert "The index is empty" in model.calls[0].system_prompt
    assert "- [A](a.md) — kept" in model.calls[1].system_prompt
