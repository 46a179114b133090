"""Token counting never undercounts CJK text."""

from __future__ import annotations

import pytest

from mnemoscope.model import count_tokens, estimate_tokens, tokenizer_name
from mnemoscope.model._tokens import _tiktoken_encoder

CHINESE_100 = (
    "记忆是智能体的核心能力之一它让模型在多轮对话中保持上下文并在新的会话里回忆起用户的偏好与事实"
    * 3
)
CHINESE_100 = CHINESE_100[:100]
JAPANESE = "長期記憶はエージェントがユーザーの好みを覚えるための仕組みです。"
KOREAN = "장기 기억은 에이전트가 사용자의 선호를 기억하게 합니다."


def test_hundred_chinese_characters_are_at_least_hundred_tokens() -> None:
    assert len(CHINESE_100) == 100
    assert estimate_tokens(CHINESE_100) >= 100
    assert count_tokens(CHINESE_100) >= 100


@pytest.mark.parametrize("text", [JAPANESE, KOREAN, "混合 text with 中文 and English 单词"])
def test_other_cjk_scripts_count_at_least_one_token_per_character(text: str) -> None:
    cjk_chars = sum(1 for ch in text if ord(ch) >= 0x1100 and not ch.isspace())
    assert estimate_tokens(text) >= cjk_chars


def test_estimate_grows_with_text() -> None:
    assert estimate_tokens(CHINESE_100 * 2) >= 2 * estimate_tokens(CHINESE_100) - 1
    assert estimate_tokens("a") >= 1


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_estimate_is_not_below_tiktoken(encoding: str) -> None:
    enc = _tiktoken_encoder(encoding)
    if enc is None:
        pytest.skip(
            f"tiktoken or its {encoding!r} encoding file is not available offline "
            "(install the 'tokenizer' extra and cache the encoding in TIKTOKEN_CACHE_DIR)"
        )
    for text in (CHINESE_100, JAPANESE, KOREAN):
        assert estimate_tokens(text) >= len(enc.encode(text))


def test_tokenizer_name_reports_what_is_used() -> None:
    name = tokenizer_name()
    assert name == "estimate" or name.startswith("tiktoken:")
    if name == "estimate":
        assert count_tokens(CHINESE_100) == estimate_tokens(CHINESE_100)
