from __future__ import annotations

from mnemoscope.model import estimate_tokens


def test_estimate_never_undercounts_cjk() -> None:
    # BPE tokenizers spend at least one token per common Chinese character
    text = "我住在杭州，喜欢简洁的中文回答。" * 10
    assert estimate_tokens(text) >= len(text)


def test_estimate_latin_is_reasonable() -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 20
    # ~10 tokens per sentence with real tokenizers; estimate within a factor of 1.6
    assert 180 <= estimate_tokens(text) <= 320


def test_estimate_empty() -> None:
    assert estimate_tokens("") == 0
