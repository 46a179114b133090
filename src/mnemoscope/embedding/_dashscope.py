"""DashScope embeddings (``text-embedding-v4``, ...) through the OpenAI-compatible endpoint.

Example (the seed's construction)::

    import os
    from mnemoscope.credential import DashScopeCredential
    from mnemoscope.embedding import DashScopeEmbeddingModel

    embedding_model = DashScopeEmbeddingModel(
        credential=DashScopeCredential(api_key=os.environ["DASHSCOPE_API_KEY"]),
        model="text-embedding-v4",
        dimensions=1536,
    )
"""

from __future__ import annotations

from typing import Unpack

from mnemoscope._http import ClientOptions
from mnemoscope.credential import DashScopeCredential
from mnemoscope.embedding._openai import OpenAIEmbeddingModel
from mnemoscope.errors import UserError

DASHSCOPE_MAX_BATCH = 10
"""DashScope's compatible-mode embeddings accept at most 10 texts per request."""


class DashScopeEmbeddingModel(OpenAIEmbeddingModel):
    """DashScope embeddings.

    Args:
        credential: a :class:`~mnemoscope.credential.DashScopeCredential`; by default one
            reading ``$DASHSCOPE_API_KEY``.
        model: ``"text-embedding-v4"`` (dimensions 2048, 1536, 1024, 768, 512, 256, 128 or
            64) or ``"text-embedding-v3"``.
        dimensions: the vector size, sent with every request.
        batch_size: texts per request (at most 10).
        **options: as for :class:`~mnemoscope.embedding.OpenAIEmbeddingModel`:
            ``base_url`` (overrides the credential's endpoint), ``timeout``,
            ``max_retries`` and ``client`` (an ``openai.AsyncOpenAI`` to use, not closed by
            :meth:`aclose`).
    """

    provider = "dashscope"
    credential_class = DashScopeCredential

    def __init__(
        self,
        credential: DashScopeCredential | None = None,
        model: str = "text-embedding-v4",
        dimensions: int = 1536,
        *,
        batch_size: int = DASHSCOPE_MAX_BATCH,
        **options: Unpack[ClientOptions],
    ) -> None:
        if batch_size > DASHSCOPE_MAX_BATCH:
            raise UserError(
                f"DashScopeEmbeddingModel: batch_size={batch_size} exceeds DashScope's limit; "
                f"use batch_size <= {DASHSCOPE_MAX_BATCH}"
            )
        super().__init__(
            model, dimensions, credential, send_dimensions=True, batch_size=batch_size, **options
        )
