"""The :class:`Agent`: a ReAct loop whose phases are wrapped by middleware.

Example::

    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=OpenAIChatModel("gpt-4o-mini"),
        toolkit=Toolkit(tools=[Read(), Write(), Edit()]),
        middlewares=[AgenticMemoryMiddleware(workdir="/tmp/demo")],
    )
    msg = await agent.reply("Remember that I live in Hangzhou.")
    async for event in agent.reply_stream("What did I tell you?"):
        ...
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from functools import partial

from mnemoscope.agent._acting import act_step, acting_core
from mnemoscope.agent._chain import compose
from mnemoscope.agent._context_engine import ContextEngine
from mnemoscope.agent._reasoning import model_call_core, reasoning_core
from mnemoscope.agent._state import AgentState
from mnemoscope.context import ContextBuilder, ContextPolicy
from mnemoscope.errors import UserError
from mnemoscope.memory import InMemoryMemory, MemoryBase
from mnemoscope.message import (
    AssistantMsg,
    Msg,
    TextBlock,
    ToolResultBlock,
    UserMsg,
    as_msg,
    new_id,
)
from mnemoscope.middleware import (
    AgentEvent,
    ExitReason,
    MiddlewareBase,
    ReasoningContext,
    ReasoningStartEvent,
    ReplyContext,
    ReplyEndEvent,
    ReplyStartEvent,
)
from mnemoscope.model import ChatModelBase
from mnemoscope.tool import COMPACT_TOOL, Toolkit

TOOL_RESULT_MARK = "tool_result"
FULL_OUTPUTS_KEY = "full_outputs"
"""Metadata key of a tool-result message holding outputs cut before they reached the model:
``{"<position of the result in the message>": full text}`` (stored, never sent)."""
READ_OUTPUT_TOOL = "read_tool_output"
HISTORY_EXCLUDED_MARKS = ("hint", "compressed")
"""Marks of stored messages not shown again in later replies (one-off injections)."""


class Agent:
    """A ReAct agent: reason, act, repeat until the model answers without tool calls.

    Args:
        name: the agent's name (used as the name of its messages).
        system_prompt: base instructions; middleware may extend them.
        model: the chat model.
        toolkit: tools the model may call. The calls of one step whose tools are
            concurrency-safe run at once (consecutive ones; permission decisions stay
            one at a time, in call order); the others run alone, in order.
        middlewares: outermost first.
        memory: short-term memory; a fresh :class:`InMemoryMemory` by default.
        max_iters: maximum reasoning steps per reply.
        max_context_tokens: token budget of one model input (``None``: no budget). It
            also bounds tool results: the results of one step share about a quarter of
            it (at most ``toolkit.max_output_chars`` each); what is cut is kept in the
            result message's ``metadata[FULL_OUTPUTS_KEY]``, stored but never sent.
        max_history_messages: load at most this many of the latest stored messages per
            reply (``None``: the whole session). Bounds the read from a large session
            store; the token budget then decides what of it the model sees.
        user_name: name given to string inputs turned into user messages.
        context_policy: the whole context policy (window, answer reserve, compaction,
            budgets per part, tool-result cap, summariser); see
            :class:`~mnemoscope.context.ContextPolicy`. ``max_context_tokens=N`` is
            ``ContextPolicy(window_tokens=N)``; give one or the other.
    """

    def __init__(
        self,
        name: str,
        system_prompt: str,
        model: ChatModelBase,
        toolkit: Toolkit | None = None,
        middlewares: Sequence[MiddlewareBase] | None = None,
        memory: MemoryBase | None = None,
        max_iters: int = 10,
        max_context_tokens: int | None = None,
        max_history_messages: int | None = None,
        user_name: str = "user",
        context_policy: ContextPolicy | None = None,
    ) -> None:
        if not isinstance(model, ChatModelBase):
            raise UserError(f"model must be a ChatModelBase, got {type(model).__name__}")
        if max_iters < 1:
            raise UserError(f"max_iters must be at least 1, got {max_iters}")
        if max_history_messages is not None and max_history_messages < 0:
            raise UserError(
                f"max_history_messages must be None or >= 0, got {max_history_messages}"
            )
        self.name = name
        self.system_prompt = system_prompt
        self.model = model
        self.toolkit = toolkit if toolkit is not None else Toolkit()
        self.middlewares = list(middlewares or [])
        self.memory = memory if memory is not None else InMemoryMemory()
        self.max_iters = max_iters
        self.max_history_messages = max_history_messages
        self.user_name = user_name
        if context_policy is not None and max_context_tokens is not None:
            raise UserError(
                "give either max_context_tokens or context_policy, not both: "
                "max_context_tokens=N is context_policy=ContextPolicy(window_tokens=N)"
            )
        if context_policy is not None and not isinstance(context_policy, ContextPolicy):
            raise UserError(
                f"context_policy must be a ContextPolicy, got {type(context_policy).__name__}"
            )
        self.context_policy = context_policy or ContextPolicy.from_max_tokens(max_context_tokens)
        if COMPACT_TOOL in self.toolkit and self.context_policy.summarizer is None:
            raise UserError(
                f"the {COMPACT_TOOL} tool needs a summariser to write its summaries: give "
                "the agent context_policy=ContextPolicy(summarizer=ModelSummarizer(model)) "
                "(or ExtractiveSummarizer()), or remove CompactTool from the toolkit"
            )
        self.context_builder = ContextBuilder(self.context_policy.input_tokens, model.count_tokens)
        self.context = ContextEngine(self, self.context_policy)
        self.state = AgentState()
        for mw in self.middlewares:
            if not isinstance(mw, MiddlewareBase):
                raise UserError(f"middlewares must be MiddlewareBase instances, got {mw!r}")
            mw.setup(self)
        # which hooks run is decided once, here
        self._reply_chain = compose("on_reply", self.middlewares, self._reply_core)
        self._reasoning_chain = compose(
            "on_reasoning", self.middlewares, partial(reasoning_core, self)
        )
        self._acting_chain = compose("on_acting", self.middlewares, partial(acting_core, self))
        self._model_call_chain = compose(
            "on_model_call", self.middlewares, partial(model_call_core, self)
        )
        self._compress_chain = compose(
            "on_compress_context", self.middlewares, self.context.compress_core
        )
        self._prompt_mws = [m for m in self.middlewares if m.overrides("on_system_prompt")]
        self._prompt_watchers = [
            m for m in self.middlewares if m.overrides("system_prompt_changed")
        ]

    # ------------------------------------------------------------------ public
    async def reply(self, msg: Msg | str) -> Msg:
        """Answer one message; returns the final assistant message."""
        final: Msg | None = None
        async for event in self.reply_stream(msg):
            if isinstance(event, ReplyEndEvent):
                final = event.msg
        assert final is not None
        return final

    async def reply_stream(self, msg: Msg | str) -> AsyncIterator[AgentEvent]:
        """Answer one message, yielding events; the last one is a :class:`ReplyEndEvent`."""
        ctx = ReplyContext(agent=self, input=as_msg(msg, name=self.user_name))
        yield ReplyStartEvent(reply_id=ctx.reply_id, input=ctx.input)
        try:
            async for event in self._reply_chain(ctx):
                if not isinstance(event, ReplyEndEvent):
                    yield event
                for queued in ctx.drain_events():
                    yield queued
        except BaseException as exc:  # a middleware outside the core may raise too
            if ctx.exit_reason is None:
                ctx.exit_reason = _exit_reason_of(exc)
            raise
        finally:
            await ctx.cancel_tasks()
        for queued in ctx.drain_events():
            yield queued
        assert ctx.result is not None
        yield ReplyEndEvent(
            reply_id=ctx.reply_id,
            msg=ctx.result,
            exit_reason="max_iters" if ctx.exit_reason == "max_iters" else "done",
        )

    # ------------------------------------------------------------------- loop
    async def _reply_core(self, ctx: ReplyContext) -> AsyncIterator[AgentEvent]:
        # the reason is set here, innermost, so that every on_reply middleware sees it
        try:
            async for event in self._reply_loop(ctx):
                yield event
        except BaseException as exc:
            if ctx.exit_reason is None:
                ctx.exit_reason = _exit_reason_of(exc)
            raise

    async def _reply_loop(self, ctx: ReplyContext) -> AsyncIterator[AgentEvent]:
        async for event in self.context.load(ctx):
            yield event
        await self.memory.add(ctx.input)
        for iteration in range(1, self.max_iters + 1):
            yield ReasoningStartEvent(reply_id=ctx.reply_id, iteration=iteration)
            rctx = ReasoningContext(reply=ctx, iteration=iteration)
            async for event in self._reasoning_chain(rctx):
                yield event
            assert rctx.msg is not None
            step = rctx.msg
            tool_uses = step.tool_uses
            if not tool_uses:
                ctx.transcript.append(step)
                await self.memory.add(step)
                ctx.result = step
                ctx.exit_reason = "done"
                self.context.after_reply()
                return
            results: list[ToolResultBlock] = []
            full_outputs: dict[str, str] = {}
            async for event in act_step(self, ctx, tool_uses, results, full_outputs):
                yield event
            result_id = new_id()
            if full_outputs:
                results = self._point_to_full_outputs(result_id, results, full_outputs)
            result_msg = UserMsg(
                "tool",
                results,
                id=result_id,
                metadata={FULL_OUTPUTS_KEY: full_outputs} if full_outputs else {},
            )
            ctx.transcript += [step, result_msg]
            # the tool use, its results and their mark are stored together, in one atomic batch
            await self.memory.add([step, result_msg], marks={result_msg.id: TOOL_RESULT_MARK})
        ctx.exit_reason = "max_iters"
        ctx.result = self._max_iters_reply(ctx)
        ctx.transcript.append(ctx.result)
        await self.memory.add(ctx.result)
        self.context.after_reply()

    def _point_to_full_outputs(
        self, msg_id: str, results: list[ToolResultBlock], full_outputs: dict[str, str]
    ) -> list[ToolResultBlock]:
        """Tell the model where the whole text of a cut result is (when it can read it)."""
        if READ_OUTPUT_TOOL not in self.toolkit:
            return results
        out = list(results)
        for key, full in full_outputs.items():
            i = int(key)
            note = (
                f"\n[The whole output ({len(full):,} characters) is stored: read any part "
                f"with {READ_OUTPUT_TOOL}(message_id={msg_id!r}, index={i}, offset=0, "
                "length=4000)]"
            )
            block = out[i]
            if isinstance(block.output, str):
                out[i] = block.model_copy(update={"output": block.output + note})
            else:
                out[i] = block.model_copy(update={"output": [*block.output, TextBlock(text=note)]})
        return out

    async def wait_for_compaction(self, wait_seconds: float | None = None) -> bool:
        """Wait for a background compaction (at most ``wait_seconds``); True once none runs."""
        return await self.context.wait_background(wait_seconds)

    def _output_chars(self, n_results: int) -> int | None:
        """Characters one result of a step may send, from the context budget."""
        policy = self.context_policy
        budget = self.context_builder.max_tokens
        if budget is None:
            return policy.tool_result_chars
        # a step's results share a quarter of the budget, at ~2 characters a token (the
        # estimate's rate for Latin text is 3.5; CJK text spends more tokens a character)
        chars = int(budget * policy.tool_results_share) * 2 // max(n_results, 1)
        if policy.tool_result_chars is not None:
            chars = min(chars, policy.tool_result_chars)
        return chars

    def _max_iters_reply(self, ctx: ReplyContext) -> Msg:
        last_text = next(
            (
                m.get_text_content()
                for m in reversed(ctx.transcript)
                if m.role == "assistant" and m.get_text_content()
            ),
            "",
        )
        notice = (
            f"I stopped after {self.max_iters} reasoning steps (max_iters) without a final answer."
        )
        text = f"{last_text}\n\n{notice}" if last_text else notice
        return AssistantMsg(
            self.name, [TextBlock(text=text)], metadata={"exit_reason": "max_iters"}
        )

    async def _ensure_system_prompt(self, ctx: ReplyContext) -> None:
        """Build the system prompt once per reply; rebuild only when a middleware says so."""
        if ctx.system_prompt is not None:
            if not self._prompt_watchers:
                return
            changed = await asyncio.gather(
                *(m.system_prompt_changed(ctx) for m in self._prompt_watchers)
            )
            if not any(changed):
                return
        prompt = self.system_prompt
        for mw in self._prompt_mws:
            prompt = await mw.on_system_prompt(ctx, prompt)
        ctx.system_prompt = prompt

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={self.model!r}, middlewares={self.middlewares!r})"


def _exit_reason_of(exc: BaseException) -> ExitReason:
    """``cancelled`` when the reply was stopped from outside, ``error`` when it failed."""
    stopped = isinstance(exc, asyncio.CancelledError | GeneratorExit | KeyboardInterrupt)
    return "cancelled" if stopped else "error"
