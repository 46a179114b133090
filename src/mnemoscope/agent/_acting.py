"""The acting phase: permission check, then execution of one tool call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from mnemoscope.message import ToolResultBlock
from mnemoscope.middleware import ActingContext, AgentEvent, PermissionEvent
from mnemoscope.permission import PermissionRequest
from mnemoscope.tool import ToolContext
from mnemoscope.tool._output import describe_exception, must_propagate

if TYPE_CHECKING:
    from mnemoscope.agent._agent import Agent


async def acting_core(agent: Agent, ctx: ActingContext) -> AsyncIterator[AgentEvent]:
    """Validate, decide permission, execute; the result lands in ``ctx.result``."""
    tool_use = ctx.tool_use
    prepared = agent.toolkit.prepare(tool_use)
    if isinstance(prepared, ToolResultBlock):
        ctx.result = prepared
        return
    tool, tool_input = prepared
    ctx.tool = tool
    perm = agent.state.permission_context
    tool_ctx = ToolContext(
        tool_use_id=tool_use.id,
        permission_context=perm,
        reply=ctx.reply,
        state=agent.state.tool_state,
    )
    try:
        # tool code (check_permissions, permission_paths) must not crash the reply: a
        # failing check is an error result and the call is not run
        decision = await tool.check_permissions(tool_input, tool_ctx)
        paths = tool.permission_paths(tool_input)
        if decision is None:
            decision = perm.decide(
                tool.name,
                is_read_only=tool.is_read_only,
                auto_allow=tool.auto_allow,
                paths=[(pa.path, pa.access) for pa in paths],
            )
    except BaseException as exc:
        if must_propagate(exc):
            raise
        ctx.result = ToolResultBlock(
            id=tool_use.id,
            name=tool.name,
            state="error",
            output=(
                f"The permission check of {tool.name} failed ({describe_exception(exc)}), "
                "so the call was not run."
            ),
        )
        return
    if decision.behavior == "ask":
        approved = False
        if perm.ask_callback is not None:
            request = PermissionRequest(
                tool_name=tool.name,
                tool_input=tool_use.input,
                paths=[pa.path for pa in paths],
                message=decision.message,
            )
            approved = bool(await perm.ask_callback(request))
        yield PermissionEvent(
            reply_id=ctx.reply.reply_id,
            tool_use_id=tool_use.id,
            tool_name=tool.name,
            behavior="ask",
            approved=approved,
            message=decision.message,
        )
        if not approved:
            why = "the user declined" if perm.ask_callback else "no one is available to approve it"
            ctx.result = ToolResultBlock(
                id=tool_use.id,
                name=tool.name,
                state="denied",
                output=(
                    f"Permission needed: {decision.message} The call was not run because {why}. "
                    "Do not retry it; tell the user what you wanted to do."
                ),
            )
            return
    elif decision.behavior == "deny":
        yield PermissionEvent(
            reply_id=ctx.reply.reply_id,
            tool_use_id=tool_use.id,
            tool_name=tool.name,
            behavior="deny",
            message=decision.message,
        )
        ctx.result = ToolResultBlock(
            id=tool_use.id,
            name=tool.name,
            state="denied",
            output=f"Permission denied: {decision.message}",
        )
        return
    ctx.result = await agent.toolkit.execute(tool, tool_input, tool_use, tool_ctx)
