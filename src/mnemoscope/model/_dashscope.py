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

from typing import Unpack

from mnemoscope.credential import DashScopeCredential
from mnemoscope.model._openai import OpenAIChatModel
from mnemoscope.model._sdk import SDKChatOptions


class DashScopeChatModel(OpenAIChatModel):
    """A DashScope (Qwen) chat model; the OpenAI adapter with DashScope's credential.

    Args:
        credential: a :class:`~mnemoscope.credential.DashScopeCredential`; by default one
            reading ``$DASHSCOPE_API_KEY``.
        model: e.g. ``"qwen-max"``, ``"qwen-plus"``, ``"qwen3-max"``.
        stream: stream responses over the wire.
        **options: as for :class:`~mnemoscope.model.OpenAIChatModel`: ``base_url``
            (overrides the credential's endpoint, by default
            ``https://dashscope.aliyuncs.com/compatible-mode/v1``), ``generate_kwargs``
            (sent with every call; DashScope-specific keys such as ``enable_thinking`` or
            ``enable_search`` go into the JSON body), ``timeout``, ``max_retries``,
            ``client`` (an ``openai.AsyncOpenAI`` to use instead of building one) and
            ``token_counter``.
    """

    provider = "dashscope"
    credential_class = DashScopeCredential

    def __init__(
        self,
        credential: DashScopeCredential | None = None,
        model: str = "qwen-max",
        stream: bool = False,
        **options: Unpack[SDKChatOptions],
    ) -> None:
        super().__init__(model, credential, stream=stream, **options)
