"""Provider credentials: secrets as ``SecretStr``, read from the environment when not given."""

from mnemoscope.credential._credentials import (
    DASHSCOPE_BASE_URL,
    AnthropicCredential,
    CredentialBase,
    DashScopeCredential,
    OpenAICredential,
)

__all__ = [
    "DASHSCOPE_BASE_URL",
    "AnthropicCredential",
    "CredentialBase",
    "DashScopeCredential",
    "OpenAICredential",
]
