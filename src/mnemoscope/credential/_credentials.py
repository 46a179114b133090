"""Provider credentials: an API key kept as a :class:`~pydantic.SecretStr`, plus endpoint.

Example::

    from mnemoscope.credential import DashScopeCredential

    cred = DashScopeCredential()            # reads DASHSCOPE_API_KEY
    cred = DashScopeCredential(api_key="sk-...", base_url="https://dashscope-intl.aliyuncs.com/compatible-mode/v1")
    repr(cred)                              # the key is shown as '**********'
    cred.get_api_key()                      # the plain key, for the SDK client

A credential is resolved when it is constructed: when ``api_key`` is not given it is read
from the provider's environment variable, and when neither is set a
:class:`~mnemoscope.errors.UserError` names the variable to set.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, SecretStr, field_serializer, model_validator

from mnemoscope._redact import redact_url
from mnemoscope.errors import UserError


class CredentialBase(BaseModel):
    """An API key (never shown by ``repr``/``str``/``model_dump_json``) and an endpoint.

    A secret inside ``base_url`` (``http://user:password@proxy/v1``, ``?api_key=...``) is
    masked the same way in ``repr``/``str``/``model_dump_json``; :attr:`base_url` itself
    keeps the real URL for the HTTP client.

    Subclasses set :attr:`env_var` (where the key is read from when not given),
    :attr:`base_url_env_var` and :attr:`default_base_url`.

    Attributes:
        api_key: the secret key.
        base_url: the endpoint, or ``None`` for the SDK's default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    env_var: ClassVar[str] = ""
    base_url_env_var: ClassVar[str | None] = None
    default_base_url: ClassVar[str | None] = None
    provider: ClassVar[str] = ""

    api_key: SecretStr
    base_url: str | None = None

    if TYPE_CHECKING:  # the key is optional for callers: it is read from the environment

        def __init__(
            self, *, api_key: str | SecretStr | None = None, base_url: str | None = None
        ) -> None: ...

    @model_validator(mode="before")
    @classmethod
    def _from_env(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        key = data.get("api_key")
        if isinstance(key, SecretStr):
            key = key.get_secret_value()
        if not key:
            key = os.environ.get(cls.env_var, "")
        if not key:
            raise UserError(
                f"{cls.__name__} has no API key: pass api_key=... or set the "
                f"{cls.env_var} environment variable"
                + (
                    " (servers that ignore keys, e.g. Ollama, vLLM or llama.cpp, accept any "
                    "non-empty value such as api_key='unused')"
                    if cls.provider == "openai"
                    else ""
                )
            )
        data["api_key"] = key
        if not data.get("base_url"):
            env_url = os.environ.get(cls.base_url_env_var) if cls.base_url_env_var else None
            data["base_url"] = env_url or cls.default_base_url
        return data

    def get_api_key(self) -> str:
        """The plain API key (hand it to the SDK client only)."""
        return self.api_key.get_secret_value()

    @field_serializer("base_url", when_used="json")
    def _shown_base_url(self, value: str | None) -> str | None:
        return redact_url(value)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name == "base_url" else value


class OpenAICredential(CredentialBase):
    """Credentials for OpenAI or any OpenAI-compatible server.

    Args:
        api_key: the key; defaults to ``$OPENAI_API_KEY``.
        base_url: e.g. ``http://localhost:11434/v1`` for Ollama; defaults to
            ``$OPENAI_BASE_URL`` or the OpenAI API.
        organization: optional OpenAI organization id (``$OPENAI_ORG_ID``).
    """

    env_var: ClassVar[str] = "OPENAI_API_KEY"
    base_url_env_var: ClassVar[str | None] = "OPENAI_BASE_URL"
    provider: ClassVar[str] = "openai"

    organization: str | None = None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            api_key: str | SecretStr | None = None,
            base_url: str | None = None,
            organization: str | None = None,
        ) -> None: ...

    @model_validator(mode="after")
    def _org_from_env(self) -> OpenAICredential:
        if self.organization is None and os.environ.get("OPENAI_ORG_ID"):
            object.__setattr__(self, "organization", os.environ["OPENAI_ORG_ID"])
        return self


DASHSCOPE_BASE_URL = "https://dashscope.aliyuncs.com/compatible-mode/v1"
"""DashScope's OpenAI-compatible endpoint (mainland China region)."""


class DashScopeCredential(CredentialBase):
    """Credentials for Alibaba Cloud DashScope (Qwen models), as in the seed.

    Args:
        api_key: the key; defaults to ``$DASHSCOPE_API_KEY``.
        base_url: the OpenAI-compatible endpoint; defaults to ``$DASHSCOPE_BASE_URL`` or
            :data:`DASHSCOPE_BASE_URL`. Use
            ``https://dashscope-intl.aliyuncs.com/compatible-mode/v1`` outside China.
    """

    env_var: ClassVar[str] = "DASHSCOPE_API_KEY"
    base_url_env_var: ClassVar[str | None] = "DASHSCOPE_BASE_URL"
    default_base_url: ClassVar[str | None] = DASHSCOPE_BASE_URL
    provider: ClassVar[str] = "dashscope"

    if TYPE_CHECKING:

        def __init__(
            self, *, api_key: str | SecretStr | None = None, base_url: str | None = None
        ) -> None: ...


class AnthropicCredential(CredentialBase):
    """Credentials for the Anthropic Messages API.

    Args:
        api_key: the key; defaults to ``$ANTHROPIC_API_KEY``.
        base_url: defaults to ``$ANTHROPIC_BASE_URL`` or the Anthropic API.
    """

    env_var: ClassVar[str] = "ANTHROPIC_API_KEY"
    base_url_env_var: ClassVar[str | None] = "ANTHROPIC_BASE_URL"
    provider: ClassVar[str] = "anthropic"

    if TYPE_CHECKING:

        def __init__(
            self, *, api_key: str | SecretStr | None = None, base_url: str | None = None
        ) -> None: ...
