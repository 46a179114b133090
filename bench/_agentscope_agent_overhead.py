"""AgentScope 2.0.11 side of ``bench/agent_overhead.py`` (runs in the side venv, not ours).

Run by the main script as::

    /work/side/as2/bin/python bench/_agentscope_agent_overhead.py --replies 300

It drives AgentScope's ``Agent`` with a zero-latency scripted chat model (a
``ChatModelBase`` subclass that returns pre-built ``ChatResponse`` objects, no I/O) and a
trivial async function tool, and prints one JSON object on stdout: per-reply wall times
(seconds) for every scenario and configuration, plus what was disabled and why.

The sleeping-tool scenarios (``sleep5_async``, ``sleep5_sync``: 5 calls of a tool that
sleeps 100 ms in one step) also record, per reply, the slowest call's own duration
(``"slowest"`` in the JSON), the ceiling the main script compares the wall time with.

Each reply uses a fresh ``Agent`` built outside the timed region (so history never grows
and every reply does the same work), sharing one toolkit per row; only
``await agent.reply(...)`` is timed. After every reply the harness checks that the tools
really ran and the final answer came back (a correctness check of the harness, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import sys
import time
from collections import deque
from typing import Any

import agentscope
from agentscope.agent import Agent, InjectionConfig
from agentscope.credential import CredentialBase
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import TextBlock, ToolCallBlock, ToolResultBlock, UserMsg
from agentscope.middleware import MiddlewareBase
from agentscope.model import ChatModelBase, ChatResponse, ChatUsage
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, Toolkit
from pydantic import BaseModel

FINAL_TEXT = "All done."
SYSTEM_PROMPT = "You are a benchmark agent."
SLEEP_MS = 100
TOOL_OF = {"sleep5_async": "nap", "sleep5_sync": "nap_sync"}
CALL_SECONDS: list[float] = []
"""How long each sleeping call of the current reply took, measured by the call itself."""


async def echo(text: str) -> str:
    """Return the text unchanged.

    Args:
        text (`str`):
            The text to echo.
    """
    return f"echo: {text}"


async def nap(text: str) -> str:
    """Sleep 100 ms, like a short HTTP fetch.

    Args:
        text (`str`):
            A label.
    """
    started = time.perf_counter()
    await asyncio.sleep(SLEEP_MS / 1000)
    CALL_SECONDS.append(time.perf_counter() - started)
    return f"slept: {text}"


def nap_sync(text: str) -> str:
    """Sleep 100 ms in blocking code, like a sync HTTP client.

    Args:
        text (`str`):
            A label.
    """
    started = time.perf_counter()
    time.sleep(SLEEP_MS / 1000)
    CALL_SECONDS.append(time.perf_counter() - started)
    return f"slept: {text}"


class ScriptedModel(ChatModelBase):
    """Zero-latency fake model: pops the next scripted response, no I/O."""

    class Parameters(BaseModel):
        """No parameters."""

    def __init__(self, script: list[list[Any]]) -> None:
        super().__init__(
            credential=CredentialBase(),
            model="scripted",
            parameters=self.Parameters(),
            stream=False,
            max_retries=0,
        )
        # the agent reads ``model.formatter.supported_input_media_types``; like
        # ScriptedChatModel on mnemoscope's side, this model never formats its input
        self.formatter = OpenAIChatFormatter()
        self._queue: deque[list[Any]] = deque(script)
        self.n_calls = 0

    async def _call_api(
        self,
        model_name: str,
        messages: list[Any],
        tools: list[dict] | None = None,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> ChatResponse:
        self.n_calls += 1
        await asyncio.sleep(0)  # a real model call always yields to the loop
        blocks = self._queue.popleft()
        return ChatResponse(
            content=blocks,
            is_last=True,
            usage=ChatUsage(input_tokens=0, output_tokens=0, time=0.0),
        )


class NoopMiddleware(MiddlewareBase):
    """Overrides every hook and only delegates."""

    async def on_reply(self, agent, input_kwargs, next_handler):  # type: ignore[no-untyped-def]
        async for item in next_handler(**input_kwargs):
            yield item

    async def on_reasoning(self, agent, input_kwargs, next_handler):  # type: ignore[no-untyped-def]
        async for item in next_handler(**input_kwargs):
            yield item

    async def on_acting(self, agent, input_kwargs, next_handler):  # type: ignore[no-untyped-def]
        async for item in next_handler(**input_kwargs):
            yield item

    async def on_check_permission(self, agent, input_kwargs, next_handler):  # type: ignore[no-untyped-def]
        return await next_handler(**input_kwargs)

    async def on_model_call(self, agent, input_kwargs, next_handler):  # type: ignore[no-untyped-def]
        return await next_handler(**input_kwargs)

    async def on_compress_context(self, agent, input_kwargs, next_handler):  # type: ignore[no-untyped-def]
        await next_handler(**input_kwargs)

    async def on_system_prompt(self, agent, current_prompt):  # type: ignore[no-untyped-def]
        return current_prompt


def _call(i: int, name: str = "echo") -> ToolCallBlock:
    return ToolCallBlock(id=f"call_{i}", name=name, input=json.dumps({"text": f"t{i}"}))


def make_script(scenario: str) -> tuple[list[list[Any]], int, int]:
    """(script, expected model calls, expected tool calls); built fresh for each reply."""
    final = [TextBlock(text=FINAL_TEXT)]
    if scenario == "tools0":
        return [final], 1, 0
    if scenario == "tools1":
        return [[_call(0)], final], 2, 1
    if scenario in ("tools5_parallel", "tools5_concurrent"):
        # AgentScope runs these concurrently either way (is_concurrency_safe=True default)
        return [[_call(i) for i in range(5)], final], 2, 5
    if scenario in TOOL_OF:
        return [[_call(i, TOOL_OF[scenario]) for i in range(5)], final], 2, 5
    if scenario == "tools5_sequential":
        return [[_call(i)] for i in range(5)] + [final], 6, 5
    raise ValueError(scenario)


def make_toolkit(scenario: str) -> Toolkit:
    func: Any = {"sleep5_async": nap, "sleep5_sync": nap_sync}.get(scenario, echo)
    tool = FunctionTool(
        func,
        # AgentScope asks the user for custom function tools by default, which would park
        # the reply; mnemoscope's side allows the same trivial tool without asking.
        permission=PermissionDecision(behavior=PermissionBehavior.ALLOW, message="bench"),
    )
    return Toolkit(tools=[tool])


def make_agent(model: ScriptedModel, toolkit: Toolkit, config: str, middleware: bool) -> Agent:
    kwargs: dict[str, Any] = {}
    if config == "lean":
        kwargs["injection_config"] = InjectionConfig(inject_runtime_state=False)
    return Agent(
        name="assistant",
        system_prompt=SYSTEM_PROMPT,
        model=model,
        toolkit=toolkit,
        middlewares=[NoopMiddleware()] if middleware else None,
        **kwargs,
    )


def check(
    agent: Agent, model: ScriptedModel, msg: Any, n_model: int, n_tools: int, prefix: str
) -> None:
    """The harness is right: every tool ran, its result is in context, the answer came back."""
    assert msg.get_text_content() == FINAL_TEXT, msg
    assert model.n_calls == n_model, (model.n_calls, n_model)
    results = [
        b
        for m in agent.state.context
        for b in m.get_content_blocks()
        if isinstance(b, ToolResultBlock)
    ]
    assert len(results) == n_tools, results
    for r in results:
        text = r.output if isinstance(r.output, str) else "".join(b.text for b in r.output)
        assert r.state == "success" and text.startswith(prefix), r


async def run_case(
    scenario: str,
    config: str,
    middleware: bool,
    replies: int,
    warmup: int,
    slowest: list[float],
) -> list[float]:
    """Wall times of the timed replies; ``slowest`` gets each one's slowest sleeping call."""
    times: list[float] = []
    toolkit = make_toolkit(scenario)  # tools are long-lived: one per row
    prefix = "slept: t" if scenario in TOOL_OF else "echo: t"
    for i in range(warmup + replies):
        script, n_model, n_tools = make_script(scenario)
        model = ScriptedModel(script)
        agent = make_agent(model, toolkit, config, middleware)
        user = UserMsg(name="user", content="Please run the tools.")
        CALL_SECONDS.clear()
        started = time.perf_counter()
        msg = await agent.reply(user)
        elapsed = time.perf_counter() - started
        check(agent, model, msg, n_model, n_tools, prefix)
        if i >= warmup:
            times.append(elapsed)
            if CALL_SECONDS:
                slowest.append(max(CALL_SECONDS))
    return times


class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--sleep-replies", type=int, default=20)
    parser.add_argument(
        "--scenarios",
        default="tools0,tools1,tools5_parallel,tools5_sequential,tools5_concurrent,"
        "sleep5_async,sleep5_sync",
    )
    args = parser.parse_args()

    # AgentScope's logger prints INFO records to stderr by default. Count whatever is
    # logged during the run (none is expected on this path) so the output can say so.
    counter = _Counter()
    logging.getLogger("as").addHandler(counter)

    results: dict[str, dict[str, list[float]]] = {}
    slowest: dict[str, dict[str, list[float]]] = {}
    for scenario in args.scenarios.split(","):
        sleeping = scenario in TOOL_OF
        replies = args.sleep_replies if sleeping else args.replies
        warmup = min(args.warmup, 2) if sleeping else args.warmup
        for middleware in (False, True):
            key = f"{scenario}{'+mw' if middleware else ''}"
            results[key], slowest[key] = {}, {}
            # the sleeping rows measure concurrency, not per-reply overhead: defaults only
            for config in ("defaults",) if sleeping else ("lean", "defaults"):
                gc.collect()
                slowest[key][config] = []
                results[key][config] = await run_case(
                    scenario, config, middleware, replies, warmup, slowest[key][config]
                )
    json.dump(
        {
            "agentscope_version": agentscope.__version__,
            "python": sys.version.split()[0],
            "log_records": counter.count,
            "configs": {
                "defaults": "Agent(...) with default configs (runtime-state injection on)",
                "lean": "InjectionConfig(inject_runtime_state=False): no time/context hint "
                "injection (mnemoscope has no such feature)",
            },
            "notes": [
                "no I/O feature is on by default in AgentScope 2.0.11's Agent: offloader=None "
                "(no file offloading), tracing is an opt-in middleware (not added), no studio",
                "the tool is FunctionTool(echo, permission=ALLOW) (the default is ASK)",
                "5 calls in one step run concurrently (is_concurrency_safe=True, the default)",
                "a sync function tool runs on the event loop (FunctionTool.call calls it "
                "directly), so the 5 sync sleeps of one step run one after another",
            ],
            "results": results,
            "slowest": slowest,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    asyncio.run(main())
