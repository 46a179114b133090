"""Qwen models on Alibaba Cloud DashScope, through its OpenAI-compatible endpoint.

Example (the seed's construction)::

    import os
    from mnemoscope.credential import DashScopeCredential
    from mnemoscope.model import DashScopeChatModel

    model = DashScopeChatModel(
        credential=DashScopeCredential(api_key=os.environ["DASHSCOPE_API_KEY"]),
        model="qwen-max",
        stream=False,
    )

Qwen3 thinking is switched with ``generate_kwargs={"enable_thinking": True}``; the
reasoning comes back as a :class:`~mnemoscope.message.ThinkingBlock`.
"""

from __future__ import annotations

from typing import Any

import openai

from mnemoscope.credential import DashScopeCredential
from mnemoscope.errors import UserError
from mnemoscope.model._openai import DEFAULT_TIMEOUT, OpenAIChatModel
from mnemoscope.model._tokens import TokenCounter


class DashScopeChatModel(OpenAIChatModel):
    """A DashScope (Qwen) chat model; the OpenAI adapter with DashScope's credential.

    Args:
        credential: a :class:`~mnemoscope.credential.DashScopeCredential`; by default one
            reading ``$DASHSCOPE_API_KEY``.
        model: e.g. ``"qwen-max"``, ``"qwen-plus"``, ``"qwen3-max"``.
        stream: stream responses over the wire.
        base_url: overrides the credential's endpoint (default
            ``https://dashscope.aliyuncs.com/compatible-mode/v1``).
        generate_kwargs: sent with every call; DashScope-specific keys such as
            ``enable_thinking`` or ``enable_search`` go into the JSON body.
        timeout: seconds per HTTP request.
        max_retries: SDK retries on transient errors.
        client: an ``openai.AsyncOpenAI`` to use instead of building one.
        token_counter: counts tokens of a text.
    """

    provider = "dashscope"
    credential_class = DashScopeCredential

    def __init__(
        self,
        credential: DashScopeCredential | None = None,
        model: str = "qwen-max",
        stream: bool = False,
        *,
        base_url: str | None = None,
        generate_kwargs: dict[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        client: openai.AsyncOpenAI | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        if isinstance(credential, str):
            raise UserError(
                "DashScopeChatModel takes the credential first: "
                "DashScopeChatModel(credential=DashScopeCredential(api_key=...), model=...)"
            )
        if credential is None and client is None:
            credential = DashScopeCredential(base_url=base_url)
        super().__init__(
            model,
            credential,
            base_url=base_url,
            stream=stream,
            generate_kwargs=generate_kwargs,
            timeout=timeout,
            max_retries=max_retries,
            client=client,
            token_counter=token_counter,
        )
