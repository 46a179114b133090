"""A deterministic, dependency-free embedder for fast offline tests.

Example::

    from mnemoscope.testing import HashEmbeddingModel

    embedder = HashEmbeddingModel(dimensions=256)
    a, b, c = await embedder.embed(["dark mode charts", "charts in dark mode", "tax forms"])
    # cosine(a, b) > cosine(a, c): shared words land in the same buckets

Feature hashing ("the hashing trick"): every lower-cased word, every word bigram and every
CJK character bigram is hashed (BLAKE2b, so the result is the same in every process) to
a bucket and a sign; the bucket counts are damped with ``1 + log(count)`` and the vector is
L2-normalised. Texts that share words are close; it knows no synonyms.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re

from mnemoscope.embedding import EmbeddingModelBase

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def _features(text: str) -> list[str]:
    words = [w.lower() for w in _WORD.findall(text)]
    feats: list[str] = []
    for word in words:
        chars = _CJK.findall(word)
        if chars and len(chars) == len(word):  # a run of CJK: characters and their bigrams
            feats.extend(chars)
            feats.extend(a + b for a, b in itertools.pairwise(chars))
        else:
            feats.append(word)
    feats.extend(f"{a} {b}" for a, b in itertools.pairwise(words))
    return feats or ["<empty>"]


def hash_embedding(text: str, dimensions: int) -> list[float]:
    """The L2-normalised feature-hashing vector of ``text`` (see module docstring)."""
    buckets: dict[int, float] = {}
    for feat in _features(text):
        digest = hashlib.blake2b(feat.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        index = value % dimensions
        sign = 1.0 if (value >> 63) & 1 else -1.0
        buckets[index] = buckets.get(index, 0.0) + sign
    vector = [0.0] * dimensions
    for index, count in buckets.items():
        if count:
            vector[index] = math.copysign(1.0 + math.log(abs(count)), count)
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:  # every feature cancelled out: fall back to a fixed unit vector
        vector[0] = 1.0
        return vector
    return [x / norm for x in vector]


class HashEmbeddingModel(EmbeddingModelBase):
    """Deterministic feature-hashing embeddings; no model, no network, no randomness.

    Args:
        dimensions: vector size.
        model: a name reported in ``repr`` and stored alongside vectors.
        batch_size: texts per batch.
    """

    def __init__(
        self, dimensions: int = 256, *, model: str = "hash-embedding", batch_size: int = 256
    ) -> None:
        super().__init__(model, dimensions=dimensions, batch_size=batch_size)

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [hash_embedding(t, self.dimensions) for t in texts]
