"""AnthropicChatModel over real HTTP against the test server's minimal Messages API."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest
from pydantic import BaseModel

from mnemoscope.credential import AnthropicCredential
from mnemoscope.errors import MissingExtraError, ModelCallError, UserError
from mnemoscope.message import AssistantMsg, Msg, SystemMsg, ToolResultBlock, UserMsg
from mnemoscope.model import AnthropicChatModel, ToolSchema
from mnemoscope.testing import OpenAICompatServer, ServerReply, ServerToolCall

pytest.importorskip("anthropic", reason="the 'anthropic' extra is not installed")

KEY = "sk-ant-test"
LOOKUP: ToolSchema = {
    "name": "lookup",
    "description": "Look a word up.",
    "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}},
}


@pytest.fixture
async def server() -> AsyncIterator[OpenAICompatServer]:
    async with OpenAICompatServer() as srv:
        yield srv


@pytest.fixture
async def model(server: OpenAICompatServer) -> AsyncIterator[AnthropicChatModel]:
    m = AnthropicChatModel(
        "claude-test",
        AnthropicCredential(api_key=KEY, base_url=server.root_url),
        max_retries=0,
    )
    yield m
    await m.aclose()


async def test_text_and_system(model: AnthropicChatModel, server: OpenAICompatServer) -> None:
    server.queue(ServerReply(text="Bonjour", usage=(7, 2)))
    response = await model([SystemMsg("Answer in French."), UserMsg("a", "Hello")])
    assert response.text == "Bonjour"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (7, 2)
    [req] = server.requests
    assert req.path == "/v1/messages"
    assert req["system"] == "Answer in French."
    assert req["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
    assert req["max_tokens"] == 4096
    assert KEY in (req.authorization or "")


async def test_tool_round_trip(model: AnthropicChatModel, server: OpenAICompatServer) -> None:
    server.queue(ServerToolCall("lookup", {"word": "mnemonic"}), "It aids memory.")
    history: list[Msg] = [UserMsg("a", "What is a mnemonic?")]
    first = await model(history, tools=[LOOKUP], tool_choice="required")
    [use] = first.tool_uses
    assert (use.name, use.input) == ("lookup", {"word": "mnemonic"})
    assert first.stop_reason == "tool_use"
    history += [
        AssistantMsg("bot", first.content),
        UserMsg("tools", [ToolResultBlock(id=use.id, name="lookup", output="memory aid")]),
    ]
    assert (await model(history, tools=[LOOKUP])).text == "It aids memory."
    assert server.requests[0]["tool_choice"] == {"type": "any"}
    turns = server.requests[1]["messages"]
    assert turns[1]["content"][0] == {
        "type": "tool_use",
        "id": use.id,
        "name": "lookup",
        "input": {"word": "mnemonic"},
    }
    assert turns[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": use.id,
        "content": "memory aid",
    }


async def test_streaming(model: AnthropicChatModel, server: OpenAICompatServer) -> None:
    model.stream = True
    server.queue(
        ServerReply(
            text="one two three",
            reasoning="counting",
            tool_calls=[ServerToolCall("lookup", {"word": "x"})],
            usage=(5, 9),
        )
    )
    chunks = [c async for c in model.stream_chunks([UserMsg("a", "count")])]
    text = [c.delta for c in chunks if c.kind == "text"]
    assert len(text) == 3 and "".join(text) == "one two three"
    final = chunks[-1].final
    assert final is not None
    assert final.text == "one two three" and final.thinking == "counting"
    assert [u.input for u in final.tool_uses] == [{"word": "x"}]
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (5, 9)
    assert server.requests[0]["stream"] is True


class Definition(BaseModel):
    word: str
    meaning: str


async def test_structured_output(model: AnthropicChatModel, server: OpenAICompatServer) -> None:
    server.queue(ServerToolCall("Definition", {"word": "a", "meaning": "b"}))
    result = await model.generate_structured_output([UserMsg("a", "define a")], Definition)
    assert result == Definition(word="a", meaning="b")
    assert server.requests[0]["tool_choice"] == {"type": "tool", "name": "Definition"}


async def test_http_error(model: AnthropicChatModel, server: OpenAICompatServer) -> None:
    server.fail_next(529, "Overloaded")
    with pytest.raises(
        ModelCallError, match=r"anthropic model 'claude-test'.*HTTP 529.*Overloaded"
    ):
        await model([UserMsg("a", "hi")])


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(MissingExtraError, match=r"'anthropic' extra.*mnemoscope\[anthropic\]"):
        AnthropicChatModel("claude", api_key=KEY)


async def test_unreachable_server_is_reported_as_unreachable() -> None:
    # the classifier once knew only the openai SDK's classes: this said "unusable response"
    async with OpenAICompatServer() as srv:
        url = srv.root_url
    model = AnthropicChatModel("claude-test", api_key=KEY, base_url=url, max_retries=0, timeout=5)
    try:
        with pytest.raises(ModelCallError, match=r"could not be reached.*is the server running"):
            await model([UserMsg("a", "hi")])
    finally:
        await model.aclose()


def test_construction_checks_what_every_sdk_model_checks() -> None:
    # the SDK models share one constructor: AnthropicChatModel once skipped these checks
    with pytest.raises(UserError, match="needs a model name"):
        AnthropicChatModel("", api_key=KEY)
    with pytest.raises(UserError, match="not both"):
        AnthropicChatModel("claude", AnthropicCredential(api_key=KEY), api_key=KEY)
    with pytest.raises(UserError, match=r"expects credential=AnthropicCredential"):
        AnthropicChatModel("claude", "sk-ant")  # type: ignore[arg-type]


async def test_a_passed_client_is_used_and_left_open(server: OpenAICompatServer) -> None:
    import anthropic

    client = anthropic.AsyncAnthropic(api_key=KEY, base_url=server.root_url, max_retries=0)
    model = AnthropicChatModel("claude-test", client=client)
    server.queue(ServerReply(text="Hi"))
    assert (await model([UserMsg("a", "hi")])).text == "Hi"
    await model.aclose()
    assert not client.is_closed()
    assert model.base_url == str(client.base_url)
    await client.close()
