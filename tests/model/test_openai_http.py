"""OpenAIChatModel and DashScopeChatModel over real HTTP against OpenAICompatServer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import openai
import pytest
from pydantic import BaseModel

from mnemoscope.credential import DashScopeCredential, OpenAICredential
from mnemoscope.errors import ModelCallError, UserError, ValidationError
from mnemoscope.message import AssistantMsg, Msg, SystemMsg, ToolResultBlock, UserMsg
from mnemoscope.model import RAW_ARGUMENTS_KEY, DashScopeChatModel, OpenAIChatModel, ToolSchema
from mnemoscope.testing import HTTPErrorReply, OpenAICompatServer, ServerReply, ServerToolCall

KEY = "sk-test-key"
WEATHER: ToolSchema = {
    "name": "get_weather",
    "description": "Weather of a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
async def server() -> AsyncIterator[OpenAICompatServer]:
    async with OpenAICompatServer(api_key=KEY) as srv:
        yield srv


@pytest.fixture(params=["openai", "dashscope"])
async def model(
    request: pytest.FixtureRequest, server: OpenAICompatServer
) -> AsyncIterator[OpenAIChatModel]:
    if request.param == "openai":
        m: OpenAIChatModel = OpenAIChatModel(
            "gpt-test", api_key=KEY, base_url=server.base_url, max_retries=0
        )
    else:
        m = DashScopeChatModel(
            credential=DashScopeCredential(api_key=KEY, base_url=server.base_url),
            model="qwen-max",
            stream=False,
            max_retries=0,
        )
    yield m
    await m.aclose()


async def test_text_reply_and_request(model: OpenAIChatModel, server: OpenAICompatServer) -> None:
    server.queue(ServerReply(text="Hello, Alice!", usage=(12, 4)))
    response = await model([SystemMsg("Be kind."), UserMsg("alice", "Hi")])
    assert response.text == "Hello, Alice!"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 4)
    assert response.stop_reason == "stop"
    [req] = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.authorization == f"Bearer {KEY}"
    assert req["model"] == model.model
    assert req["messages"] == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi"},
    ]
    assert "tools" not in req and "stream" not in req


async def test_tool_call_round_trip(model: OpenAIChatModel, server: OpenAICompatServer) -> None:
    server.queue([ServerToolCall("get_weather", {"city": "Paris"})], "It is sunny in Paris.")
    history: list[Msg] = [UserMsg("alice", "Weather in Paris?")]
    first = await model(history, tools=[WEATHER], tool_choice="auto")
    [use] = first.tool_uses
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"})
    assert first.stop_reason == "tool_calls"
    history += [
        AssistantMsg("bot", first.content),
        UserMsg("tools", [ToolResultBlock(id=use.id, name=use.name, output="sunny, 24C")]),
    ]
    second = await model(history, tools=[WEATHER])
    assert second.text == "It is sunny in Paris."

    sent_tools = server.requests[0]["tools"]
    assert sent_tools[0]["function"]["name"] == "get_weather"
    assert sent_tools[0]["function"]["parameters"] == WEATHER["input_schema"]
    assert server.requests[0]["tool_choice"] == "auto"
    messages = server.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["tool_calls"][0]["id"] == use.id
    assert json.loads(messages[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert messages[2] == {"role": "tool", "tool_call_id": use.id, "content": "sunny, 24C"}


async def test_invalid_tool_arguments_are_kept_raw(
    model: OpenAIChatModel, server: OpenAICompatServer
) -> None:
    server.queue(ServerToolCall("get_weather", '{"city": Paris}'))
    [use] = (await model([UserMsg("a", "?")], tools=[WEATHER])).tool_uses
    assert use.input == {RAW_ARGUMENTS_KEY: '{"city": Paris}'}


async def test_reasoning_becomes_thinking(
    model: OpenAIChatModel, server: OpenAICompatServer
) -> None:
    server.queue(ServerReply(text="4", reasoning="2 + 2 = 4"))
    response = await model([UserMsg("a", "2+2?")])
    assert (response.thinking, response.text) == ("2 + 2 = 4", "4")


async def test_streaming_deltas_equal_final_text(
    model: OpenAIChatModel, server: OpenAICompatServer
) -> None:
    model.stream = True
    text = "The quick brown fox jumps over the lazy dog."
    server.queue(ServerReply(text=text, reasoning="think first", usage=(30, 11)))
    chunks = [c async for c in model.stream_chunks([UserMsg("a", "story")])]
    text_deltas = [c.delta for c in chunks if c.kind == "text"]
    assert len(text_deltas) > 1  # really streamed, word by word
    assert "".join(text_deltas) == text
    assert "".join(c.delta for c in chunks if c.kind == "thinking") == "think first"
    final = chunks[-1].final
    assert chunks[-1].kind == "final" and final is not None
    assert final.text == text and final.thinking == "think first"
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (30, 11)
    [req] = server.requests
    assert req["stream"] is True
    assert req["stream_options"] == {"include_usage": True}


async def test_streaming_tool_calls(model: OpenAIChatModel, server: OpenAICompatServer) -> None:
    model.stream = True
    server.queue(
        ServerReply(
            text="Checking both.",
            tool_calls=[
                ServerToolCall("get_weather", {"city": "Paris"}),
                ServerToolCall("get_weather", {"city": "東京"}),
            ],
        )
    )
    response = await model([UserMsg("a", "?")], tools=[WEATHER], tool_choice="required")
    assert response.text == "Checking both."
    assert [u.input for u in response.tool_uses] == [{"city": "Paris"}, {"city": "東京"}]
    assert len({u.id for u in response.tool_uses}) == 2
    assert server.requests[0]["tool_choice"] == "required"


class Weather(BaseModel):
    """A weather report."""

    city: str
    celsius: float


async def test_structured_output(model: OpenAIChatModel, server: OpenAICompatServer) -> None:
    server.queue(ServerToolCall("Weather", {"city": "Rome", "celsius": 21.5}))
    report = await model.generate_structured_output([UserMsg("a", "Rome?")], Weather)
    assert report == Weather(city="Rome", celsius=21.5)
    [req] = server.requests
    assert req["tool_choice"] == {"type": "function", "function": {"name": "Weather"}}
    assert req["tools"][0]["function"]["parameters"]["required"] == ["city", "celsius"]


async def test_structured_output_retries_with_the_error(
    model: OpenAIChatModel, server: OpenAICompatServer
) -> None:
    server.queue(
        ServerToolCall("Weather", {"city": "Rome"}),
        ServerToolCall("Weather", {"city": "Rome", "celsius": 20}),
    )
    report = await model.generate_structured_output([UserMsg("a", "Rome?")], Weather)
    assert report.celsius == 20
    retry_messages = server.requests[1]["messages"]
    assert "celsius" in retry_messages[-1]["content"]  # the validation error was shown


async def test_structured_output_gives_up(
    model: OpenAIChatModel, server: OpenAICompatServer
) -> None:
    server.queue("no idea", "still no idea")
    with pytest.raises(ValidationError, match="Weather"):
        await model.generate_structured_output([UserMsg("a", "Rome?")], Weather, retries=1)
    assert len(server.requests) == 2


@pytest.mark.parametrize(("status", "hint"), [(500, "HTTP 500"), (429, "rate limited")])
async def test_http_error_becomes_model_call_error(
    model: OpenAIChatModel, server: OpenAICompatServer, status: int, hint: str
) -> None:
    server.queue(HTTPErrorReply(status, "upstream exploded"))
    with pytest.raises(ModelCallError, match=hint) as info:
        await model([UserMsg("a", "hi")])
    message = str(info.value)
    assert "upstream exploded" in message
    assert model.provider in message and repr(model.model) in message
    assert info.value.status_code == status  # type: ignore[attr-defined]
    assert isinstance(info.value.__cause__, openai.APIStatusError)


async def test_streaming_http_error(model: OpenAIChatModel, server: OpenAICompatServer) -> None:
    model.stream = True
    server.fail_next(503, "overloaded")
    with pytest.raises(ModelCallError, match="HTTP 503: overloaded"):
        await model([UserMsg("a", "hi")])


async def test_wrong_key_is_reported(server: OpenAICompatServer) -> None:
    model = OpenAIChatModel("m", api_key="wrong", base_url=server.base_url, max_retries=0)
    with pytest.raises(ModelCallError, match=r"401.*check the API key"):
        await model([UserMsg("a", "hi")])
    await model.aclose()


async def test_unreachable_server() -> None:
    async with OpenAICompatServer() as srv:
        url = srv.base_url
    model = OpenAIChatModel("m", api_key=KEY, base_url=url, max_retries=0, timeout=5)
    with pytest.raises(ModelCallError, match="could not be reached"):
        await model([UserMsg("a", "hi")])
    await model.aclose()


async def test_sdk_retries_transient_errors(server: OpenAICompatServer) -> None:
    model = OpenAIChatModel("m", api_key=KEY, base_url=server.base_url, max_retries=1)
    server.fail_next(500, "blip", headers={"retry-after-ms": "1"})
    server.queue("recovered")
    assert (await model([UserMsg("a", "hi")])).text == "recovered"
    assert len(server.requests) == 2
    await model.aclose()


async def test_generate_kwargs_and_provider_specific_keys(server: OpenAICompatServer) -> None:
    model = DashScopeChatModel(
        credential=DashScopeCredential(api_key=KEY),
        model="qwen3-max",
        base_url=server.base_url,
        generate_kwargs={"temperature": 0.2, "enable_thinking": True},
    )
    server.queue("ok", "ok")
    await model([UserMsg("a", "hi")])
    await model([UserMsg("a", "hi")], max_tokens=50, temperature=0.9)
    first, second = server.requests
    assert first["temperature"] == 0.2
    assert first["enable_thinking"] is True  # not an SDK parameter: sent in the body
    assert second["temperature"] == 0.9 and second["max_tokens"] == 50
    await model.aclose()


def test_dashscope_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DASHSCOPE_BASE_URL", raising=False)
    model = DashScopeChatModel(credential=DashScopeCredential(api_key=KEY))
    assert model.model == "qwen-max" and model.stream is False
    assert model.base_url == "https://dashscope.aliyuncs.com/compatible-mode/v1"
    assert KEY not in repr(model)
    monkeypatch.setenv("DASHSCOPE_API_KEY", KEY)
    assert DashScopeChatModel(model="qwen-plus").credential is not None


def test_misconfiguration_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        OpenAIChatModel("gpt-4o-mini")
    with pytest.raises(UserError, match="DASHSCOPE_API_KEY"):
        DashScopeChatModel(model="qwen-max")
    with pytest.raises(UserError, match="not both"):
        OpenAIChatModel("m", OpenAICredential(api_key=KEY), api_key=KEY)
    with pytest.raises(UserError, match="DashScopeCredential"):
        DashScopeChatModel(credential=OpenAICredential(api_key=KEY))  # type: ignore[arg-type]
    # a model name where the credential goes first: the message shows the call to write
    with pytest.raises(UserError, match=r"got str; write DashScopeChatModel\(credential="):
        DashScopeChatModel("qwen-max")  # type: ignore[arg-type]


async def test_passed_client_is_not_closed(server: OpenAICompatServer) -> None:
    client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, max_retries=0)
    model = OpenAIChatModel("m", client=client)
    server.queue("one", "two")
    assert (await model([UserMsg("a", "hi")])).text == "one"
    await model.aclose()
    await model.aclose()  # twice is fine
    assert not client.is_closed()
    assert (await OpenAIChatModel("m", client=client)([UserMsg("a", "hi")])).text == "two"
    await client.close()


async def test_aclose_closes_own_client(server: OpenAICompatServer) -> None:
    model = OpenAIChatModel("m", api_key=KEY, base_url=server.base_url)
    await model.aclose()
    await model.aclose()
    assert model._client.is_closed()
