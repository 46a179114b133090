"""Toolkit and FunctionTool: schemas from hints and docstrings, validation, errors."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

from mnemoscope.errors import UserError
from mnemoscope.message import ToolUseBlock
from mnemoscope.tool import FunctionTool, ToolContext, Toolkit, function_tool, parse_docstring


async def get_weather(city: str, unit: Literal["C", "F"] = "C", days: int = 1) -> str:
    """Current weather of a city.

    Args:
        city: the city name, e.g. "Hangzhou".
        unit: temperature unit.
        days (int): how many days,
            counted from today.

    Returns:
        A sentence.
    """
    return f"{city}: sunny, 20 {unit}, {days} day(s)"


def test_schema_from_hints_and_docstring():
    schema = FunctionTool(get_weather).schema()
    assert schema["name"] == "get_weather"
    assert schema["description"] == "Current weather of a city."
    props = schema["input_schema"]["properties"]
    assert props["city"]["description"] == 'the city name, e.g. "Hangzhou".'
    assert props["city"]["type"] == "string"
    assert props["unit"]["enum"] == ["C", "F"] and props["unit"]["default"] == "C"
    assert props["days"]["description"] == "how many days, counted from today."
    assert schema["input_schema"]["required"] == ["city"]
    assert schema["input_schema"]["additionalProperties"] is False


def test_parse_docstring_sections():
    desc, params = parse_docstring(get_weather.__doc__)
    assert desc == "Current weather of a city."
    assert set(params) == {"city", "unit", "days"}
    assert parse_docstring(None) == ("", {})


async def test_execute_validates_and_runs():
    kit = Toolkit(tools=[get_weather])
    use = ToolUseBlock(id="1", name="get_weather", input={"city": "Hangzhou", "unit": "F"})
    prepared = kit.prepare(use)
    assert not isinstance(prepared, ToolUseBlock)
    tool, tool_input = prepared
    result = await kit.execute(tool, tool_input, use, ToolContext())
    assert result.state == "success" and result.output == "Hangzhou: sunny, 20 F, 1 day(s)"


def test_validation_error_is_a_readable_result():
    kit = Toolkit(tools=[get_weather])
    bad = kit.prepare(ToolUseBlock(id="2", name="get_weather", input={"unit": "K", "x": 1}))
    assert bad.state == "error" and bad.id == "2"
    text = bad.output
    assert text.startswith("Invalid input for get_weather:")
    assert "city: Field required" in text and "unit: Input should be 'C' or 'F'" in text
    assert "x: Extra inputs are not permitted" in text and "call again" in text


def test_unknown_tool_lists_available_ones():
    kit = Toolkit(tools=[get_weather])
    res = kit.prepare(ToolUseBlock(id="3", name="nope", input={}))
    assert res.state == "error" and "Available tools: get_weather" in res.output


async def test_raising_tool_becomes_error_result_and_cancellation_propagates():
    def broken(x: int) -> str:
        """Always fails."""
        raise RuntimeError(f"bad {x}")

    async def slow() -> str:
        """Takes forever."""
        await asyncio.sleep(3600)
        return "never"

    kit = Toolkit(tools=[broken, slow])
    use = ToolUseBlock(id="4", name="broken", input={"x": 7})
    tool, tool_input = kit.prepare(use)
    res = await kit.execute(tool, tool_input, use, ToolContext())
    assert res.state == "error" and res.output == "broken failed: RuntimeError: bad 7"
    use = ToolUseBlock(id="5", name="slow", input={})
    tool, tool_input = kit.prepare(use)
    task = asyncio.create_task(kit.execute(tool, tool_input, use, ToolContext()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_context_parameter_is_hidden_and_injected():
    @function_tool(is_read_only=True)
    def whoami(ctx: ToolContext, greeting: str = "hi") -> dict:
        """Echo the call id."""
        return {"greeting": greeting, "id": ctx.tool_use_id}

    assert whoami.is_read_only
    assert "ctx" not in whoami.schema()["input_schema"]["properties"]
    res = await whoami.call(whoami.Input(), ToolContext(tool_use_id="abc"))
    assert res.output == '{"greeting": "hi", "id": "abc"}'


def test_misconfigurations_raise_user_error():
    def varargs(*args: int) -> None:
        """No."""

    with pytest.raises(UserError, match=r"\*args"):
        FunctionTool(varargs)
    kit = Toolkit(tools=[get_weather])
    with pytest.raises(UserError, match="two tools are named"):
        kit.add(get_weather)
