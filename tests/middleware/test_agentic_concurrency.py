"""Two agents in separate processes save memories at the same time: nothing is lost."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mnemoscope.memory.markdown._files import parse_index, parse_memory_file

# One process: an agent whose scripted "model" saves memories the documented way (write the
# file, then add its index line with Read + Edit) and, like a real model, reads the index
# again and redoes the Edit whenever the tool says the file changed since it was read.
WRITER = r'''
import asyncio, re, sys
from mnemoscope.agent import Agent
from mnemoscope.middleware import AgenticMemoryMiddleware
from mnemoscope.memory.markdown._files import render_memory_file
from mnemoscope.permission import PermissionMode
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import Edit, Read, Toolkit, Write

workdir, who, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
memdir = workdir + "/Memory"
index = memdir + "/MEMORY.md"
conflicts = 0


class Saver:
    """Decides the next step from the last tool result, as a model would."""

    def __init__(self, i):
        self.name = f"{who}_{i:03d}.md"
        self.line = f"- [{who} {i}]({self.name}) — memory {i} of {who}"
        self.step = "write"

    def __call__(self, call):
        global conflicts
        last = call.messages[-1]
        result = last.tool_results[0] if last.tool_results else None
        if self.step == "write":
            self.step = "read"
            body = render_memory_file(
                f"{who} {i}", f"Read when {who} item {i} matters", "project", "x"
            )
            return tool_call("Write", file_path=f"{memdir}/{self.name}", content=body)
        if self.step == "read":
            self.step = "edit"
            return tool_call("Read", file_path=index)
        if self.step == "edit":
            text = result.output_text()
            numbered = r"^\s*\d+\t"
            lines = [re.sub(numbered, "", l) for l in text.splitlines() if re.match(numbered, l)]
            self.step = "check"
            if not lines:
                return tool_call(
                    "Edit", file_path=index, old_string="", new_string=self.line + "\n"
                )
            return tool_call(
                "Edit", file_path=index, old_string=lines[-1],
                new_string=lines[-1] + "\n" + self.line,
            )
        if self.step == "check":
            if result.is_error:
                # a conflict: the index changed since this Read; or the Read saw it empty and
                # the system prompt of the next call (which counts as a read) showed the other
                # process's lines, so the Edit ran against that version with old_string=""
                err = result.output_text()
                assert "changed" in err or "old_string is empty" in err, err
                conflicts += 1
                self.step = "edit"
                return tool_call("Read", file_path=index)
            return "saved"


async def main():
    global i
    model = ScriptedChatModel()
    agent = Agent(
        name=who, system_prompt="", model=model,
        toolkit=Toolkit(tools=[Read(), Write(), Edit()]),
        middlewares=[AgenticMemoryMiddleware(workdir=workdir, retrieval=False)],
        max_iters=200,
    )
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    for i in range(count):
        saver = Saver(i)
        model._default = saver
        msg = await agent.reply(f"remember item {i}")
        assert msg.get_text_content() == "saved", msg.get_text_content()
    print("conflicts", conflicts)

asyncio.run(main())
'''


def test_two_processes_saving_50_memories_each_lose_nothing(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    workdir = tmp_path / "shared"
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(workdir), who, "50"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("alpha", "beta")
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    memdir = workdir / "Memory"
    files = sorted(f.name for f in memdir.glob("*.md") if f.name != "MEMORY.md")
    assert len(files) == 100
    for name in files:
        assert parse_memory_file(name, name, (memdir / name).read_text()).valid
    entries = parse_index((memdir / "MEMORY.md").read_text())
    assert len(entries) == 100
    assert sorted(e.target for e in entries) == files
    # how often a save had to re-read the index because the other process wrote it first
    print(*(out.strip() for out, _ in outputs))
