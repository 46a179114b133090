"""Framework overhead per reply: mnemoscope's ``Agent`` beside AgentScope 2.0.11's ``Agent``.

Both agents are driven by a zero-latency scripted model (mnemoscope:
``mnemoscope.testing.ScriptedChatModel``; AgentScope: a ``ChatModelBase`` subclass returning
the same responses, see ``bench/_agentscope_agent_overhead.py``) and one trivial async
function tool, so every microsecond measured is the framework's own work: message
objects, memory, context building, middleware plumbing, tool dispatch and events.

Scenarios (one reply each):

* ``0 tools``: one model call, a text answer;
* ``1 tool``: a tool call, then the answer (2 model calls);
* ``5 tools, 1 step``: one model response with 5 parallel tool calls, then the answer;
* ``5 tools, 5 steps``: 5 sequential steps of one tool call each, then the answer
  (6 model calls);
* ``5 tools, 1 step, concurrent``: the 5 parallel calls again, with the tool marked
  read-only on mnemoscope's side so the calls run as one concurrent batch (AgentScope
  runs them concurrently in both rows: ``is_concurrency_safe=True`` is its default);

each without middleware and with one no-op middleware overriding every hook.

Tools that take time (a second table): one step of 5 calls of a tool that sleeps
100 ms (an async ``asyncio.sleep``, and a sync ``time.sleep`` that runs on a thread),
then the answer. The ceiling is the slowest of the 5 calls, as each call measures its
own duration in the same reply: a step that runs its calls concurrently takes about
that long (goal: wall time <= 1.2x of it), one that runs them in turn 5x.

Every reply uses a fresh agent (and model) built outside the timed region, so history
never grows and every reply does the same work; the toolkit, like a user's tools, is built
once per row and shared. Only ``await agent.reply(...)`` is timed. The AgentScope
side runs in its own virtualenv as a subprocess and prints JSON; this script joins both
into one markdown table. Usage::

    python bench/agent_overhead.py                     # ~300 replies per row
    python bench/agent_overhead.py --replies 1000 --json out.json
    python bench/agent_overhead.py --skip-agentscope   # mnemoscope only
    python bench/agent_overhead.py --sleep-replies 50  # replies per sleeping-tool row (20)

The AgentScope virtualenv (default ``/work/side/as2``, or ``--as2-python`` /
``MNEMOSCOPE_AS2_PYTHON``) is made with::

    python -m venv /work/side/as2 && /work/side/as2/bin/pip install agentscope==2.0.11
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mnemoscope.agent import Agent
from mnemoscope.message import UserMsg
from mnemoscope.middleware import MiddlewareBase
from mnemoscope.testing import ScriptedChatModel, tool_call
from mnemoscope.tool import FunctionTool, Toolkit

HERE = Path(__file__).resolve().parent
SIDE_SCRIPT = HERE / "_agentscope_agent_overhead.py"
DEFAULT_AS2_PYTHON = "/work/side/as2/bin/python"
AS2_SETUP = "python -m venv /work/side/as2 && /work/side/as2/bin/pip install agentscope==2.0.11"

FINAL_TEXT = "All done."
SYSTEM_PROMPT = "You are a benchmark agent."

# key -> (label, model calls, tool calls)
SCENARIOS: dict[str, tuple[str, int, int]] = {
    "tools0": ("0 tools", 1, 0),
    "tools1": ("1 tool", 2, 1),
    "tools5_parallel": ("5 tools, 1 step (parallel calls)", 2, 5),
    "tools5_sequential": ("5 tools, 5 steps (sequential)", 6, 5),
    "tools5_concurrent": ("5 tools, 1 step, concurrent (read-only tool)", 2, 5),
}
SLEEP_MS = 100
SLEEP_SCENARIOS: dict[str, tuple[str, int, int]] = {
    "sleep5_async": (f"5 calls x {SLEEP_MS} ms async sleep, 1 step", 2, 5),
    "sleep5_sync": (f"5 calls x {SLEEP_MS} ms sync sleep (thread), 1 step", 2, 5),
}
ALL_SCENARIOS = {**SCENARIOS, **SLEEP_SCENARIOS}
TOOL_OF = {"sleep5_async": "nap", "sleep5_sync": "nap_sync"}
CALL_SECONDS: list[float] = []
"""How long each sleeping call of the current reply took, measured by the call itself."""


async def echo(text: str) -> str:
    """Return the text unchanged.

    Args:
        text: the text to echo.
    """
    return f"echo: {text}"


async def nap(text: str) -> str:
    """Sleep 100 ms, like a short HTTP fetch.

    Args:
        text: a label.
    """
    started = time.perf_counter()
    await asyncio.sleep(SLEEP_MS / 1000)
    CALL_SECONDS.append(time.perf_counter() - started)
    return f"slept: {text}"


def nap_sync(text: str) -> str:
    """Sleep 100 ms in blocking code, like a sync HTTP client.

    Args:
        text: a label.
    """
    started = time.perf_counter()
    time.sleep(SLEEP_MS / 1000)
    CALL_SECONDS.append(time.perf_counter() - started)
    return f"slept: {text}"


def make_toolkit(scenario: str) -> Toolkit:
    """One toolkit per row (tools are long-lived), with only the row's tool."""
    if scenario == "tools5_concurrent":
        return Toolkit(tools=[FunctionTool(echo, is_read_only=True)])
    if scenario in TOOL_OF:
        # a fetch or a sleep only reads: async read-only tools run concurrently by
        # default; a sync one opts in (time.sleep is thread-safe)
        if scenario == "sleep5_async":
            return Toolkit(tools=[FunctionTool(nap, is_read_only=True)])
        return Toolkit(tools=[FunctionTool(nap_sync, is_read_only=True, concurrency_safe=True)])
    return Toolkit(tools=[FunctionTool(echo)])


class NoopMiddleware(MiddlewareBase):
    """Overrides every hook and only delegates: the cost of the middleware plumbing."""

    async def on_reply(self, ctx: Any, next_handler: Any) -> AsyncIterator[Any]:
        async for event in next_handler(ctx):
            yield event

    async def on_reasoning(self, ctx: Any, next_handler: Any) -> AsyncIterator[Any]:
        async for event in next_handler(ctx):
            yield event

    async def on_acting(self, ctx: Any, next_handler: Any) -> AsyncIterator[Any]:
        async for event in next_handler(ctx):
            yield event

    async def on_model_call(self, ctx: Any, next_handler: Any) -> AsyncIterator[Any]:
        async for event in next_handler(ctx):
            yield event

    async def on_system_prompt(self, ctx: Any, prompt: str) -> str:
        return prompt

    async def system_prompt_changed(self, ctx: Any) -> bool:
        return False


def make_script(scenario: str) -> list[Any]:
    """The model's responses for one reply (built fresh, outside the timed region)."""
    if scenario == "tools0":
        return [FINAL_TEXT]
    if scenario == "tools1":
        return [tool_call("echo", "call_0", text="t0"), FINAL_TEXT]
    if scenario in ("tools5_parallel", "tools5_concurrent"):
        return [[tool_call("echo", f"call_{i}", text=f"t{i}") for i in range(5)], FINAL_TEXT]
    if scenario in TOOL_OF:
        name = TOOL_OF[scenario]
        return [[tool_call(name, f"call_{i}", text=f"t{i}") for i in range(5)], FINAL_TEXT]
    if scenario == "tools5_sequential":
        return [tool_call("echo", f"call_{i}", text=f"t{i}") for i in range(5)] + [FINAL_TEXT]
    raise ValueError(scenario)


def make_agent(model: ScriptedChatModel, toolkit: Toolkit, middleware: bool) -> Agent:
    # defaults everywhere: InMemoryMemory, no token budget, default permission mode
    return Agent(
        name="assistant",
        system_prompt=SYSTEM_PROMPT,
        model=model,
        toolkit=toolkit,
        middlewares=[NoopMiddleware()] if middleware else None,
    )


async def check(agent: Agent, model: ScriptedChatModel, msg: Any, scenario: str) -> None:
    """The harness is right: every tool ran, the answer came back (not a test)."""
    _, n_model, n_tools = ALL_SCENARIOS[scenario]
    prefix = "slept: t" if scenario in TOOL_OF else "echo: t"
    assert msg.get_text_content() == FINAL_TEXT, msg
    assert len(model.calls) == n_model, (len(model.calls), n_model)
    stored = await agent.memory.get()
    results = [b for m in stored for b in m.content if getattr(b, "type", None) == "tool_result"]
    assert len(results) == n_tools, results
    for r in results:
        assert r.state == "success" and r.output_text().startswith(prefix), r


async def run_case(
    scenario: str, middleware: bool, replies: int, warmup: int, slowest: list[float]
) -> list[float]:
    """Wall times of the timed replies; ``slowest`` gets each one's slowest sleeping call."""
    times: list[float] = []
    toolkit = make_toolkit(scenario)  # tools are long-lived: one per row
    for i in range(warmup + replies):
        model = ScriptedChatModel(make_script(scenario))
        agent = make_agent(model, toolkit, middleware)
        user = UserMsg("user", "Please run the tools.")
        CALL_SECONDS.clear()
        started = time.perf_counter()
        msg = await agent.reply(user)
        elapsed = time.perf_counter() - started
        await check(agent, model, msg, scenario)
        if i >= warmup:
            times.append(elapsed)
            if CALL_SECONDS:
                slowest.append(max(CALL_SECONDS))
    toolkit.close()
    return times


async def run_mnemoscope(
    replies: int, warmup: int, sleep_replies: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(wall times per row key, slowest call per reply for the sleeping rows)."""
    results: dict[str, list[float]] = {}
    slowest: dict[str, list[float]] = {}
    for scenario in ALL_SCENARIOS:
        sleeping = scenario in SLEEP_SCENARIOS
        for middleware in (False, True):
            gc.collect()
            key = f"{scenario}{'+mw' if middleware else ''}"
            slowest[key] = []
            results[key] = await run_case(
                scenario,
                middleware,
                sleep_replies if sleeping else replies,
                min(warmup, 2) if sleeping else warmup,
                slowest[key],
            )
    return results, slowest


def run_agentscope(
    python: str, replies: int, warmup: int, sleep_replies: int
) -> dict[str, Any] | None:
    """The AgentScope side's JSON, or ``None`` (with a message) when it cannot run."""
    if not Path(python).exists():
        print(
            f"AgentScope 2.0.11 side venv not found at {python}; create it with:\n"
            f"    {AS2_SETUP}\n"
            "(or point --as2-python / MNEMOSCOPE_AS2_PYTHON at its python). "
            "Showing mnemoscope only.\n",
            file=sys.stderr,
        )
        return None
    proc = subprocess.run(
        [
            python,
            str(SIDE_SCRIPT),
            "--replies",
            str(replies),
            "--warmup",
            str(warmup),
            "--sleep-replies",
            str(sleep_replies),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        print(
            f"the AgentScope side failed (exit {proc.returncode}); is agentscope==2.0.11 "
            f"installed there? ({AS2_SETUP})\n{proc.stderr[-3000:]}",
            file=sys.stderr,
        )
        return None
    return json.loads(proc.stdout)


def stats(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return {
        "median_us": statistics.median(ordered) * 1e6,
        "p95_us": p95 * 1e6,
        "replies_per_s": len(ordered) / sum(ordered),
        "n": len(ordered),
    }


def _row_label(key: str) -> str:
    scenario, _, mw = key.partition("+")
    label, n_model, n_tools = ALL_SCENARIOS[scenario]
    suffix = " + no-op middleware" if mw else ""
    return f"{label}{suffix} | {n_model} | {n_tools}"


def render(
    mn: dict[str, dict[str, float]], as2: dict[str, dict[str, dict[str, float]]] | None
) -> str:
    head = "| scenario | model calls | tool calls | mnemoscope median µs | p95 µs | replies/s |"
    sep = "|---|---:|---:|---:|---:|---:|"
    if as2 is not None:
        head += (
            " AS2 (lean) median µs | p95 µs | replies/s | ratio (lean) |"
            " AS2 (defaults) median µs | ratio (defaults) |"
        )
        sep += "---:|---:|---:|---:|---:|---:|"
    lines = [head, sep]
    for key, m in mn.items():
        if key.partition("+")[0] in SLEEP_SCENARIOS:
            continue
        row = (
            f"| {_row_label(key)} | {m['median_us']:.0f} | {m['p95_us']:.0f}"
            f" | {m['replies_per_s']:.0f} |"
        )
        if as2 is not None and key in as2:
            lean, dflt = as2[key]["lean"], as2[key]["defaults"]
            row += (
                f" {lean['median_us']:.0f} | {lean['p95_us']:.0f} | {lean['replies_per_s']:.0f}"
                f" | {lean['median_us'] / m['median_us']:.2f}x |"
                f" {dflt['median_us']:.0f} | {dflt['median_us'] / m['median_us']:.2f}x |"
            )
        lines.append(row)
    return "\n".join(lines)


def render_sleep(
    mn: dict[str, list[float]],
    mn_slowest: dict[str, list[float]],
    as2: dict[str, dict[str, list[float]]] | None,
    as2_slowest: dict[str, dict[str, list[float]]] | None,
) -> str:
    """The sleeping-tool rows: wall time against the slowest call of the same reply."""
    head = (
        "| scenario | model calls | tool calls | slowest call ms | mnemoscope median ms"
        " | / slowest (goal <= 1.2x) |"
    )
    sep = "|---|---:|---:|---:|---:|---:|"
    if as2 is not None:
        head += " AS2 median ms | AS2 / slowest | AS2 / mnemoscope |"
        sep += "---:|---:|---:|"
    lines = [head, sep]
    for key, times in mn.items():
        if key.partition("+")[0] not in SLEEP_SCENARIOS:
            continue
        wall = statistics.median(times)
        slow = statistics.median(mn_slowest[key])
        ratios = [t / s for t, s in zip(times, mn_slowest[key], strict=True)]
        row = (
            f"| {_row_label(key)} | {slow * 1e3:.1f} | {wall * 1e3:.1f}"
            f" | {statistics.median(ratios):.2f}x |"
        )
        if as2 is not None and as2_slowest is not None and key in as2:
            # the lean and default configurations do the same here: show the defaults
            a_times, a_slow = as2[key]["defaults"], as2_slowest[key]["defaults"]
            a_wall = statistics.median(a_times)
            a_ratio = statistics.median(t / s for t, s in zip(a_times, a_slow, strict=True))
            row += f" {a_wall * 1e3:.1f} | {a_ratio:.2f}x | {a_wall / wall:.2f}x |"
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Framework overhead per reply vs AgentScope 2.0.11."
    )
    parser.add_argument("--replies", type=int, default=300, help="timed replies per row (300)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed replies per row first")
    parser.add_argument(
        "--as2-python",
        default=os.environ.get("MNEMOSCOPE_AS2_PYTHON", DEFAULT_AS2_PYTHON),
        help="python of the agentscope==2.0.11 venv (env MNEMOSCOPE_AS2_PYTHON)",
    )
    parser.add_argument(
        "--sleep-replies",
        type=int,
        default=20,
        help="timed replies per sleeping-tool row (20; each takes >= 100 ms)",
    )
    parser.add_argument("--skip-agentscope", action="store_true", help="measure mnemoscope only")
    parser.add_argument("--json", metavar="OUT", help="also write all statistics to OUT")
    args = parser.parse_args()
    warmup = args.warmup if args.warmup is not None else max(1, min(20, args.replies // 10))

    mn_raw, mn_slowest = asyncio.run(run_mnemoscope(args.replies, warmup, args.sleep_replies))
    mn = {k: stats(v) for k, v in mn_raw.items()}
    side = (
        None
        if args.skip_agentscope
        else run_agentscope(args.as2_python, args.replies, warmup, args.sleep_replies)
    )
    as2 = (
        {k: {c: stats(t) for c, t in cfgs.items()} for k, cfgs in side["results"].items()}
        if side
        else None
    )

    print(f"## Agent overhead per reply ({args.replies} timed replies per row, {warmup} warm-up)\n")
    print(
        f"Python {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} CPUs. Zero-latency scripted model, one trivial async tool; "
        "a fresh agent per reply (built outside the timed region), one toolkit per row. "
        "replies/s = timed replies / total time.\n"
    )
    print(render(mn, as2))
    print()
    print(
        f"### Tools that take time ({args.sleep_replies} timed replies per row): "
        "wall time per reply against the slowest call of the same reply\n"
    )
    print(
        render_sleep(
            mn_raw,
            mn_slowest,
            side["results"] if side else None,
            side["slowest"] if side else None,
        )
    )
    print()
    print(
        "mnemoscope: defaults (InMemoryMemory, no token budget, default permission mode), "
        "ScriptedChatModel (records every model input). The echo tool is not marked "
        "read-only, so in the '5 tools, 1 step (parallel calls)' rows its calls run one "
        "after another (a tool with side effects keeps the model's order); read-only tools "
        "(the 'concurrent' rows and the async sleeping tool) run as one concurrent batch; the "
        "sync sleeping tool opts in (concurrency_safe=True) and runs on the toolkit's "
        "bounded threads (max_tool_threads=8)."
    )
    if side:
        print(f"AgentScope {side['agentscope_version']} (Python {side['python']}):")
        for name, desc in side["configs"].items():
            print(f"- {name}: {desc}")
        for note in side["notes"]:
            print(f"- {note}")
        print(f"- log records emitted by AgentScope during the run: {side['log_records']}")
        print("ratio = AgentScope median / mnemoscope median (goal: >= 3.00x).")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "replies": args.replies,
                    "warmup": warmup,
                    "mnemoscope": mn,
                    "mnemoscope_slowest_call_s": mn_slowest,
                    "agentscope": as2,
                    "agentscope_meta": {
                        k: v for k, v in (side or {}).items() if k not in ("results", "slowest")
                    },
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
