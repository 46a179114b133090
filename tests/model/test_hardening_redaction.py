"""Issue 10, item 7: a secret in ``base_url`` never shows in a repr or an error message.

Every call goes over real HTTP to the local ``OpenAICompatServer`` (or to a closed port).
"""

from __future__ import annotations

import traceback
from collections.abc import AsyncIterator

import httpx
import pytest

from mnemoscope._redact import redact_text, redact_url, scrub_exception
from mnemoscope.agent import Agent
from mnemoscope.credential import (
    AnthropicCredential,
    DashScopeCredential,
    OpenAICredential,
)
from mnemoscope.embedding import DashScopeEmbeddingModel, OpenAIEmbeddingModel
from mnemoscope.errors import ModelCallError
from mnemoscope.message import UserMsg
from mnemoscope.model import AnthropicChatModel, DashScopeChatModel, OpenAIChatModel
from mnemoscope.model._openai import model_call_error
from mnemoscope.testing import HTTPErrorReply, OpenAICompatServer

PASSWORD = "hunter2-PW"
TOKEN = "sk-query-SEKRET"
SECRETS = (PASSWORD, TOKEN)
CLOSED = "http://alice:hunter2-PW@127.0.0.1:9/v1"  # nothing listens on port 9


def with_secrets(url: str) -> str:
    """``url`` with a password in its userinfo and an API key in its query."""
    return url.replace("http://", f"http://alice:{PASSWORD}@", 1) + f"?api_key={TOKEN}&region=eu"


def assert_hidden(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, text


def full_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


@pytest.fixture
async def server() -> AsyncIterator[OpenAICompatServer]:
    async with OpenAICompatServer() as srv:
        yield srv


# ------------------------------------------------------------------ redact_url
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pw@host/v1", "http://user:***@host/v1"),
        ("http://user:p@ss@host/v1", "http://user:***@host/v1"),  # a raw "@" in the password
        ("https://ghp_token@github.com/x", "https://***@github.com/x"),  # a token as user
        ("https://h/v1?api_key=k&region=eu", "https://h/v1?api_key=***&region=eu"),
        ("https://h/v1?token=t&apiKey=k", "https://h/v1?token=***&apiKey=***"),
        (
            "https://h/?X-Amz-Signature=s&X-Amz-Credential=c",
            "https://h/?X-Amz-Signature=***&X-Amz-Credential=***",
        ),
        (
            "https://h/?sig=s&client_secret=c&password=p",
            "https://h/?sig=***&client_secret=***&password=***",
        ),
        ("postgresql+asyncpg://u:pw@db:5432/x", "postgresql+asyncpg://u:***@db:5432/x"),
        ("http://localhost:11434/v1", "http://localhost:11434/v1"),  # nothing secret: as is
    ],
)
def test_redact_url_masks_userinfo_and_secret_query_values(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_text_masks_urls_inside_a_message_and_keeps_the_rest() -> None:
    text = f"POST {with_secrets('http://proxy:8080/v1')} failed; mail ops@example.com"
    shown = redact_text(text)
    assert_hidden(shown)
    assert "proxy:8080/v1" in shown and "region=eu" in shown and "ops@example.com" in shown
    assert redact_url(None) is None


# ----------------------------------------------------------------------- reprs
def test_chat_model_and_agent_reprs_hide_url_secrets() -> None:
    url = with_secrets("http://proxy.local:8080/v1")
    models = [
        OpenAIChatModel("gpt-test", api_key="sk-unused", base_url=url),
        DashScopeChatModel(credential=DashScopeCredential(api_key="sk-unused", base_url=url)),
        AnthropicChatModel("claude-test", api_key="sk-unused", base_url=url),
    ]
    for model in models:
        assert model.base_url == url  # the client still gets the real URL
        shown = repr(model)
        assert_hidden(shown)
        assert "alice:***@proxy.local:8080" in shown and "region=eu" in shown
        agent = Agent(name="a", system_prompt="", model=model)
        assert_hidden(repr(agent))
        assert "proxy.local:8080" in repr(agent)


def test_embedding_model_repr_hides_url_secrets() -> None:
    url = with_secrets("http://emb.local/v1")
    for model in (
        OpenAIEmbeddingModel("e", dimensions=8, api_key="sk-unused", base_url=url),
        DashScopeEmbeddingModel(
            credential=DashScopeCredential(api_key="sk-unused", base_url=url), dimensions=64
        ),
    ):
        assert_hidden(repr(model))
        assert "alice:***@emb.local" in repr(model)


@pytest.mark.parametrize("cls", [OpenAICredential, DashScopeCredential, AnthropicCredential])
def test_credential_repr_str_and_json_hide_url_secrets(cls: type[OpenAICredential]) -> None:
    url = with_secrets("http://proxy.local/v1")
    cred = cls(api_key="sk-unused", base_url=url)
    for shown in (repr(cred), str(cred), f"{cred}", cred.model_dump_json()):
        assert_hidden(shown)
        assert "alice:***@proxy.local" in shown
    assert cred.base_url == url  # the field keeps the real URL for the HTTP client


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("stream", [False, True])
async def test_http_error_from_the_server_hides_url_secrets(
    server: OpenAICompatServer, stream: bool
) -> None:
    url = server.base_url.replace("http://", f"http://alice:{PASSWORD}@")
    # a proxy that echoes, in its error body, the URL it was given
    server.queue(HTTPErrorReply(502, f"upstream {with_secrets(server.base_url)} did not answer"))
    model = OpenAIChatModel("m", api_key="sk-test", base_url=url, max_retries=0, stream=stream)
    try:
        with pytest.raises(ModelCallError) as info:
            await model([UserMsg("u", "hi")])
    finally:
        await model.aclose()
    assert server.chat_requests  # the call really went out
    message = str(info.value)
    assert info.value.status_code == 502 and "HTTP 502" in message
    assert "alice:***@127.0.0.1" in message
    assert_hidden(message)
    assert_hidden(full_traceback(info.value))  # the chained SDK errors too


async def test_unknown_route_echoing_the_query_hides_it(server: OpenAICompatServer) -> None:
    # the SDK appends the route after the query; the server's 404 quotes the whole path
    model = OpenAIChatModel(
        "m", api_key="sk-test", base_url=with_secrets(server.base_url), max_retries=0
    )
    try:
        with pytest.raises(ModelCallError) as info:
            await model([UserMsg("u", "hi")])
    finally:
        await model.aclose()
    assert info.value.status_code == 404 and "api_key=***" in str(info.value)
    assert_hidden(str(info.value))
    assert_hidden(full_traceback(info.value))


async def test_connection_errors_hide_url_secrets() -> None:
    chat = OpenAIChatModel("m", api_key="sk-test", base_url=CLOSED, max_retries=0)
    embedder = OpenAIEmbeddingModel(
        "e", dimensions=8, api_key="sk-test", base_url=CLOSED, max_retries=0
    )
    try:
        with pytest.raises(ModelCallError, match="could not be reached") as chat_info:
            await chat([UserMsg("u", "hi")])
        with pytest.raises(ModelCallError, match="could not be reached") as emb_info:
            await embedder.embed(["x"])
    finally:
        await chat.aclose()
        await embedder.aclose()
    for info in (chat_info, emb_info):
        assert "alice:***@127.0.0.1:9" in str(info.value)
        assert_hidden(str(info.value))
        assert_hidden(full_traceback(info.value))


async def test_embedding_http_error_hides_url_secrets(server: OpenAICompatServer) -> None:
    url = with_secrets(server.base_url)
    server.fail_next(500, f"could not reach {url}")
    embedder = OpenAIEmbeddingModel(
        "e", dimensions=8, api_key="sk-test", base_url=url, max_retries=0
    )
    try:
        with pytest.raises(ModelCallError) as info:
            await embedder.embed(["x"])
    finally:
        await embedder.aclose()
    assert info.value.status_code == 500
    assert_hidden(str(info.value))
    assert_hidden(full_traceback(info.value))


async def test_anthropic_error_hides_url_secrets(server: OpenAICompatServer) -> None:
    url = server.root_url.replace("http://", f"http://alice:{PASSWORD}@")
    server.queue(HTTPErrorReply(500, f"overloaded at {url}"))
    model = AnthropicChatModel("claude-test", api_key="sk-test", base_url=url, max_retries=0)
    try:
        with pytest.raises(ModelCallError) as info:
            await model([UserMsg("u", "hi")])
    finally:
        await model.aclose()
    assert info.value.status_code == 500 and "alice:***@" in str(info.value)
    assert_hidden(str(info.value))
    assert_hidden(full_traceback(info.value))


async def test_httpx_errors_quoting_the_url_are_sanitised(server: OpenAICompatServer) -> None:
    # a real httpx error names the URL it failed on, userinfo included
    url = with_secrets(server.root_url + "/nowhere")
    async with httpx.AsyncClient() as client:
        response = await client.get(url)
    with pytest.raises(httpx.HTTPStatusError) as info:
        response.raise_for_status()
    assert PASSWORD in str(info.value)  # httpx's own message leaks it
    error = model_call_error("openai", "m", url, info.value)
    assert_hidden(str(error))
    assert_hidden(str(info.value))  # the cause, shown in tracebacks, is scrubbed as well
    assert "HTTPStatusError" in str(error) and "alice:***@" in str(error)


def test_scrub_exception_walks_the_cause_chain() -> None:
    try:
        try:
            raise ValueError(f"inner {with_secrets('http://h/v1')}")
        except ValueError as inner:
            raise RuntimeError(f"outer http://bob:{PASSWORD}@h/") from inner
    except RuntimeError as outer:
        scrub_exception(outer)
        assert_hidden(full_traceback(outer))
        assert "bob:***@h" in str(outer)
