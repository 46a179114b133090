"""``mnemoscope chat``: talk to a configured model from the terminal.

Configuration comes from flags or the environment::

    MNEMOSCOPE_PROVIDER=ollama MNEMOSCOPE_MODEL=qwen2.5:7b mnemoscope chat
    mnemoscope chat --provider openai --model gpt-4o-mini          # uses OPENAI_API_KEY
    mnemoscope chat --provider openai --base-url http://127.0.0.1:8000/v1 --model my-model
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, TextIO

from mnemoscope.cli._text import aclose_all
from mnemoscope.errors import MnemoscopeError, UserError

PROVIDERS = ("openai", "ollama", "dashscope", "anthropic")
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434/v1"

HOW_TO_CONFIGURE = """\
mnemoscope chat needs a model. Configure one with flags or environment variables:

  provider   --provider / MNEMOSCOPE_PROVIDER   one of: openai, ollama, dashscope, anthropic
  model      --model    / MNEMOSCOPE_MODEL      e.g. gpt-4o-mini, qwen2.5:7b, qwen-max
  base URL   --base-url / MNEMOSCOPE_BASE_URL   any OpenAI-compatible server (vLLM, llama.cpp)
  API key    OPENAI_API_KEY, DASHSCOPE_API_KEY or ANTHROPIC_API_KEY (not needed for ollama)

Examples:
  MNEMOSCOPE_PROVIDER=ollama MNEMOSCOPE_MODEL=qwen2.5:7b mnemoscope chat
  OPENAI_API_KEY=sk-... mnemoscope chat --provider openai --model gpt-4o-mini

No model at hand? `mnemoscope demo` runs a scripted conversation offline.
"""


def add_chat_parser(sub: Any) -> None:
    p = sub.add_parser(
        "chat",
        help="chat with a configured model (see --help for configuration)",
        description="Chat with a model from the terminal, with optional agentic memory "
        "(--workdir) and a persistent session (--session-db, needs the 'sql' extra).",
        epilog=HOW_TO_CONFIGURE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--provider", default=os.environ.get("MNEMOSCOPE_PROVIDER"), choices=PROVIDERS)
    p.add_argument("--model", default=os.environ.get("MNEMOSCOPE_MODEL"))
    p.add_argument("--base-url", default=os.environ.get("MNEMOSCOPE_BASE_URL"))
    p.add_argument("--system-prompt", default="You are a helpful assistant.")
    p.add_argument(
        "--workdir",
        default=None,
        help="enable agentic long-term memory (Markdown files) in this directory",
    )
    p.add_argument("--session-db", default=None, help="keep the session in this SQLite file")
    p.add_argument("--session", default="cli", help="session id inside --session-db")
    p.set_defaults(handler=run_chat)


def make_model(provider: str | None, model: str | None, base_url: str | None) -> Any:
    """Build the chat model from the configuration, or raise with what is missing."""
    if not provider and base_url:
        provider = "openai"
    if not provider or not model:
        raise _NotConfiguredError()
    if provider in ("openai", "ollama"):
        from mnemoscope.model import OpenAIChatModel

        if provider == "ollama":
            return OpenAIChatModel(
                model, api_key="ollama", base_url=base_url or DEFAULT_OLLAMA_URL, stream=True
            )
        if base_url and not os.environ.get("OPENAI_API_KEY"):
            return OpenAIChatModel(model, api_key="not-needed", base_url=base_url, stream=True)
        return OpenAIChatModel(model, base_url=base_url, stream=True)
    if provider == "dashscope":
        from mnemoscope.credential import DashScopeCredential
        from mnemoscope.model import DashScopeChatModel

        return DashScopeChatModel(credential=DashScopeCredential(), model=model, stream=True)
    from mnemoscope.model import AnthropicChatModel

    return AnthropicChatModel(model, stream=True)


class _NotConfiguredError(Exception):
    pass


def run_chat(
    args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    try:
        model = make_model(args.provider, args.model, args.base_url)
    except _NotConfiguredError:
        print(HOW_TO_CONFIGURE, file=sys.stderr)
        return 2
    except MnemoscopeError as exc:
        raise UserError(f"{exc} (`mnemoscope chat --help` shows how to configure a model)") from exc
    return asyncio.run(_chat_loop(args, model, stdin, stdout))


async def _chat_loop(args: argparse.Namespace, model: Any, stdin: TextIO, stdout: TextIO) -> int:
    from mnemoscope.middleware import MiddlewareBase

    middlewares: list[MiddlewareBase] = []
    tools: list[Any] = []
    memory = None
    try:
        if args.session_db:
            # first: on a core install this is the step that fails (the 'sql' extra)
            from mnemoscope.memory import AsyncSQLAlchemyMemory

            memory = AsyncSQLAlchemyMemory(
                f"sqlite+aiosqlite:///{args.session_db}", session_id=args.session
            )
        if args.workdir:
            from mnemoscope.middleware import AgenticMemoryMiddleware
            from mnemoscope.tool import Edit, Read, Write

            middlewares.append(AgenticMemoryMiddleware(workdir=args.workdir))
            tools += [Read(), Write(), Edit()]
        return await _converse(args, model, middlewares, tools, memory, stdin, stdout)
    finally:
        await aclose_all(*middlewares, memory, model)


async def _converse(
    args: argparse.Namespace,
    model: Any,
    middlewares: list[Any],
    tools: list[Any],
    memory: Any,
    stdin: TextIO,
    stdout: TextIO,
) -> int:
    from mnemoscope.agent import Agent
    from mnemoscope.middleware import TextDeltaEvent, ToolResultEvent, ToolUseEvent
    from mnemoscope.permission import PermissionMode
    from mnemoscope.tool import Toolkit

    agent = Agent(
        name="assistant",
        system_prompt=args.system_prompt,
        model=model,
        toolkit=Toolkit(tools=tools),
        middlewares=middlewares,
        memory=memory,
    )
    agent.state.permission_context.mode = PermissionMode.ACCEPT_EDITS
    print("mnemoscope chat — empty line or Ctrl-D to quit", file=stdout)
    while True:
        stdout.write("you> ")
        stdout.flush()
        line = await asyncio.to_thread(stdin.readline)
        if not line.strip():
            return 0
        stdout.write("assistant> ")
        try:
            async for event in agent.reply_stream(line.rstrip("\n")):
                if isinstance(event, TextDeltaEvent):
                    stdout.write(event.delta)
                elif isinstance(event, ToolUseEvent):
                    stdout.write(f"\n  [tool] {event.tool_use.name}({event.tool_use.input})\n")
                elif isinstance(event, ToolResultEvent):
                    stdout.write(f"  [{event.result.state}] {event.result.output_text()[:200]}\n")
                stdout.flush()
        except MnemoscopeError as exc:
            stdout.write(f"\n[error] {exc}")
        stdout.write("\n")
