"""The embedding model contract."""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from mnemoscope.errors import UserError


class EmbeddingModelBase(ABC):
    """An async, batched text embedder with explicit ``dimensions``.

    Subclasses implement :meth:`_embed_batch`; :meth:`embed` splits the input into
    batches of ``batch_size`` and checks every vector has ``dimensions`` entries.
    """

    def __init__(self, model: str, *, dimensions: int, batch_size: int = 64) -> None:
        if dimensions <= 0:
            raise UserError(f"dimensions must be a positive integer, got {dimensions}")
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            vectors = await self._embed_batch(batch)
            if len(vectors) != len(batch):
                raise UserError(
                    f"{type(self).__name__} returned {len(vectors)} vectors for {len(batch)} texts"
                )
            for v in vectors:
                if len(v) != self.dimensions:
                    raise UserError(
                        f"{type(self).__name__}({self.model!r}) returned a {len(v)}-dimensional "
                        f"vector but was configured with dimensions={self.dimensions}; "
                        "set dimensions to the model's real output size"
                    )
            out.extend(vectors)
        return out

    async def embed_one(self, text: str) -> list[float]:
        return (await self.embed([text]))[0]

    @abstractmethod
    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Embed one batch (at most ``batch_size`` texts)."""

    async def aclose(self) -> None:
        """Release resources. Safe to call twice."""

    async def close(self) -> None:
        """The same as :meth:`aclose`: every mnemoscope resource answers to both spellings."""
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, dimensions={self.dimensions})"


class ThreadedEmbeddingModelBase(EmbeddingModelBase):
    """An embedder that computes on this machine, in a worker thread.

    Subclasses implement :meth:`_build` (make the model; :meth:`_load` calls it once,
    under a lock) and :meth:`_encode` (blocking; it gets the model from :meth:`_load`).
    The event loop never waits on either.
    """

    def __init__(self, model: str, *, dimensions: int, batch_size: int = 64) -> None:
        super().__init__(model, dimensions=dimensions, batch_size=batch_size)
        self._loaded: Any = None
        self._load_lock = threading.Lock()

    @abstractmethod
    def _build(self) -> Any:
        """Make the model, whatever :meth:`_encode` needs (runs once, in one thread)."""

    @abstractmethod
    def _encode(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts`` (blocking)."""

    def _load(self) -> Any:
        """The model, built on the first call (other threads wait for that one)."""
        with self._load_lock:
            if self._loaded is None:
                self._loaded = self._build()
            return self._loaded

    def _check_dimensions(self, actual: int | None) -> None:
        """Refuse a model whose vectors are not ``dimensions`` long (``None``: unknown)."""
        if actual is not None and actual != self.dimensions:
            raise UserError(
                f"{type(self).__name__}({self.model!r}) produces {actual}-dimensional "
                f"vectors but dimensions={self.dimensions}; pass dimensions={actual}"
            )

    async def load(self) -> None:
        """Load the model now (in a worker thread) instead of on the first ``embed``."""
        await asyncio.to_thread(self._load)

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, texts)

    async def aclose(self) -> None:
        """Drop the loaded model. Safe to call twice."""
        with self._load_lock:
            self._loaded = None
