from __future__ import annotations

import math

import pytest

from mnemoscope.errors import UserError
from mnemoscope.testing import HashEmbeddingModel, hash_embedding


def dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_deterministic_normalised_and_sized() -> None:
    model = HashEmbeddingModel(dimensions=128)
    first = await model.embed(["dark mode charts", ""])
    second = await HashEmbeddingModel(dimensions=128).embed(["dark mode charts", ""])
    assert first == second
    for v in first:
        assert len(v) == 128
        assert math.isclose(dot(v, v), 1.0, rel_tol=1e-9)  # empty text too: never a zero vector


async def test_shared_words_are_closer() -> None:
    model = HashEmbeddingModel(dimensions=512)
    a, b, c = await model.embed(
        ["the user prefers dark mode charts", "charts in dark mode please", "invoice due in March"]
    )
    assert dot(a, b) > dot(a, c) + 0.2
    assert dot(a, b) > dot(b, c) + 0.2


def test_case_and_punctuation_insensitive() -> None:
    assert hash_embedding("Dark mode!", 64) == hash_embedding("dark   MODE", 64)


def test_cjk_character_overlap() -> None:
    a = hash_embedding("我喜欢深色模式的图表", 256)
    b = hash_embedding("深色模式很好", 256)
    c = hash_embedding("发票三月到期", 256)
    assert dot(a, b) > dot(a, c)


def test_bad_dimensions() -> None:
    with pytest.raises(UserError, match="dimensions"):
        HashEmbeddingModel(dimensions=0)
