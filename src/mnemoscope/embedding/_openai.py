"""Embeddings over the OpenAI embeddings API (OpenAI, DashScope, Ollama, vLLM, ...).

Example::

    from mnemoscope.embedding import OpenAIEmbeddingModel

    embedder = OpenAIEmbeddingModel("text-embedding-3-small", dimensions=1536)
    local = OpenAIEmbeddingModel(
        "nomic-embed-text", dimensions=768, base_url="http://localhost:11434/v1", api_key="ollama"
    )
    vectors = await embedder.embed(["dark-mode charts", "tax forms"])
    await embedder.aclose()
"""

from __future__ import annotations

from typing import Any, ClassVar

import openai

from mnemoscope._http import DEFAULT_TIMEOUT, SDKClientAdapter, openai_client
from mnemoscope.credential import CredentialBase, OpenAICredential
from mnemoscope.embedding._base import EmbeddingModelBase
from mnemoscope.errors import ModelCallError

_DIMENSIONS_PREFIXES = ("text-embedding-3", "text-embedding-v3", "text-embedding-v4")


def supports_dimensions(model: str) -> bool:
    """Whether ``model`` is known to accept a ``dimensions`` parameter (Matryoshka models)."""
    return model.startswith(_DIMENSIONS_PREFIXES)


class OpenAIEmbeddingModel(SDKClientAdapter, EmbeddingModelBase):
    """An embedding model served over the OpenAI embeddings API.

    Args:
        model: e.g. ``"text-embedding-3-small"``.
        dimensions: the vector size; checked on every response.
        credential: key and endpoint; by default from ``api_key``/``base_url`` or the
            environment (``$OPENAI_API_KEY``).
        api_key: shortcut for ``OpenAICredential(api_key=...)``.
        base_url: the server (overrides the credential's).
        send_dimensions: pass ``dimensions`` in the request; by default only for models
            known to support it (``text-embedding-3-*``, DashScope ``text-embedding-v3/v4``).
        batch_size: texts per request.
        timeout: seconds per HTTP request.
        max_retries: SDK retries on transient errors.
        client: an ``openai.AsyncOpenAI`` to use (not closed by :meth:`aclose`).
    """

    provider = "openai"
    credential_class: ClassVar[type[CredentialBase]] = OpenAICredential
    _repr_fields = ("model", "dimensions", "base_url")
    _sdk = openai

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        dimensions: int = 1536,
        credential: CredentialBase | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        send_dimensions: bool | None = None,
        batch_size: int = 64,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        super().__init__(model, dimensions=dimensions, batch_size=batch_size)
        self.send_dimensions = (
            supports_dimensions(model) if send_dimensions is None else send_dimensions
        )
        self._open_client(
            client=client,
            credential=credential,
            api_key=api_key,
            base_url=base_url,
            build=openai_client(timeout, max_retries),
        )

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        request: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.send_dimensions:
            request["dimensions"] = self.dimensions
        try:
            response = await self._client.embeddings.create(**request)
        except openai.OpenAIError as exc:
            raise self._error(exc) from exc
        items = sorted(response.data, key=lambda d: d.index)
        if len(items) != len(texts):
            raise ModelCallError(
                f"{self.provider} embedding model {self.model!r} returned {len(items)} vectors "
                f"for {len(texts)} texts"
            )
        return [list(map(float, item.embedding)) for item in items]
