from __future__ import annotations

import pytest

from mnemoscope.credential import (
    DASHSCOPE_BASE_URL,
    AnthropicCredential,
    CredentialBase,
    DashScopeCredential,
    OpenAICredential,
)
from mnemoscope.errors import UserError

SECRET = "sk-very-secret-0123456789"

CASES = [
    (OpenAICredential, "OPENAI_API_KEY"),
    (DashScopeCredential, "DASHSCOPE_API_KEY"),
    (AnthropicCredential, "ANTHROPIC_API_KEY"),
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "DASHSCOPE_API_KEY",
        "DASHSCOPE_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize(("cls", "env_var"), CASES)
def test_key_read_from_env(
    monkeypatch: pytest.MonkeyPatch, cls: type[CredentialBase], env_var: str
) -> None:
    monkeypatch.setenv(env_var, SECRET)
    assert cls().get_api_key() == SECRET


@pytest.mark.parametrize(("cls", "env_var"), CASES)
def test_explicit_key_wins_over_env(
    monkeypatch: pytest.MonkeyPatch, cls: type[CredentialBase], env_var: str
) -> None:
    monkeypatch.setenv(env_var, "from-env")
    assert cls(api_key=SECRET).get_api_key() == SECRET


@pytest.mark.parametrize(("cls", "env_var"), CASES)
def test_missing_key_names_the_env_var(cls: type[CredentialBase], env_var: str) -> None:
    with pytest.raises(UserError, match=env_var) as info:
        cls()
    assert "api_key=" in str(info.value)
    with pytest.raises(UserError, match=env_var):
        cls(api_key="")


@pytest.mark.parametrize(("cls", "env_var"), CASES)
def test_secret_never_shown(cls: type[CredentialBase], env_var: str) -> None:
    cred = cls(api_key=SECRET)
    for shown in (repr(cred), str(cred), cred.model_dump_json(), f"{cred}", repr(cred.api_key)):
        assert SECRET not in shown
    assert "**" in repr(cred)


def test_dashscope_defaults_to_compatible_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DashScopeCredential(api_key=SECRET).base_url == DASHSCOPE_BASE_URL
    assert DASHSCOPE_BASE_URL == "https://dashscope.aliyuncs.com/compatible-mode/v1"
    monkeypatch.setenv(
        "DASHSCOPE_BASE_URL", "https://dashscope-intl.aliyuncs.com/compatible-mode/v1"
    )
    assert "intl" in (DashScopeCredential(api_key=SECRET).base_url or "")
    assert DashScopeCredential(api_key=SECRET, base_url="http://x/v1").base_url == "http://x/v1"


def test_openai_base_url_and_org(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OpenAICredential(api_key=SECRET).base_url is None  # the SDK's default endpoint
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1")
    cred = OpenAICredential(api_key=SECRET)
    assert cred.base_url == "http://localhost:11434/v1"
    assert cred.organization == "org-1"
    assert OpenAICredential(api_key=SECRET, organization="org-2").organization == "org-2"


def test_openai_missing_key_mentions_local_servers() -> None:
    with pytest.raises(UserError, match="Ollama"):
        OpenAICredential(base_url="http://localhost:11434/v1")


def test_credentials_are_frozen() -> None:
    cred = OpenAICredential(api_key=SECRET)
    with pytest.raises(Exception, match="frozen"):
        cred.base_url = "http://elsewhere"
