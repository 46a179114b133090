"""Token counting.

With ``tiktoken`` installed *and* its encoding file already in tiktoken's cache
(``TIKTOKEN_CACHE_DIR``; we never let it download), counts are exact for OpenAI models.
Otherwise :func:`estimate_tokens` is used, a documented estimate that
errs on the side of counting too many:

* every CJK / kana / hangul / fullwidth character counts as 1.5 tokens (BPE vocabularies
  usually spend one to three tokens on each; counting them as ``len / 4`` like Latin text
  would undercount Chinese by a factor of five or more);
* every other run of characters counts as ``ceil(utf8_bytes / 3.5)`` tokens, plus one
  token per whitespace-separated word boundary beyond that for very short words.

Texts longer than :data:`HUGE_TEXT_CHARS` are never tokenised (that blocks the event loop
for seconds on a multi-megabyte tool result): :func:`fast_estimate_tokens` charges
``ceil(utf8_bytes / 2)``, which is 1.5 tokens a CJK character like the estimate above and
more than it for Latin text.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
import tempfile
from collections.abc import Callable
from typing import Any

TokenCounter = Callable[[str], int]

_CJK_RANGES = (
    (0x1100, 0x11FF),  # hangul jamo
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3000, 0x30FF),  # CJK punctuation, hiragana, katakana
    (0x3100, 0x31FF),
    (0x3400, 0x4DBF),  # CJK ext A
    (0x4E00, 0x9FFF),  # CJK unified
    (0xAC00, 0xD7AF),  # hangul syllables
    (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF),  # fullwidth forms
    (0x20000, 0x2FA1F),
)


_CJK_RE = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES) + "]")
# whitespace outside ASCII: the loop counts it as one byte, whatever its UTF-8 length
_WIDE_SPACE_RE = re.compile(r"[^\S\x00-\x7f]")


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


HUGE_TEXT_CHARS = 64_000
"""Above this many characters, token counts are estimated from the size alone."""


def fast_estimate_tokens(text: str) -> int:
    """``ceil(utf8_bytes / 2)``: a size-only estimate for huge texts (module docstring)."""
    if text.isascii():
        return math.ceil(len(text) / 2)
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 2)


def estimate_tokens(text: str) -> int:
    """A conservative token estimate that needs no tokenizer (see module docstring)."""
    if not text:
        return 0
    if len(text) > HUGE_TEXT_CHARS:
        return fast_estimate_tokens(text)
    if text.isascii():
        # the common case, in C: no CJK and no wide space can be in it, one byte a char
        return max(len(text.split()), math.ceil(len(text) / 3.5))
    if _CJK_RE.search(text) is None and _WIDE_SPACE_RE.search(text) is None:
        # the loop below, in C: words are whitespace-separated runs, every byte counts
        return max(len(text.split()), math.ceil(len(text.encode("utf-8")) / 3.5))
    cjk = 0
    other_bytes = 0
    words = 0
    in_word = False
    for ch in text:
        if ord(ch) >= 0x1100 and _is_cjk(ch):
            cjk += 1
            in_word = False
            continue
        if ch.isspace():
            in_word = False
            other_bytes += 1
            continue
        if not in_word:
            words += 1
            in_word = True
        other_bytes += len(ch.encode("utf-8"))
    return math.ceil(cjk * 1.5) + max(words, math.ceil(other_bytes / 3.5))


_ENCODING_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}


def _encoding_cached(encoding: str) -> bool:
    """Whether tiktoken's encoding file is already on disk (so loading never downloads)."""
    url = _ENCODING_URLS.get(encoding)
    if url is None:
        return False
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not cache_dir:  # tiktoken's way of disabling its cache
        return False
    return os.path.exists(os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest()))


@functools.cache
def _tiktoken_encoder(encoding: str) -> Any | None:
    # never let token counting hit the network (it could hang where packets are dropped)
    if not _encoding_cached(encoding):
        return None
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        return tiktoken.get_encoding(encoding)
    except Exception:
        return None


def count_tokens(text: str, encoding: str = "o200k_base") -> int:
    """Exact count with tiktoken when its encoding is available, else the estimate.

    Texts over :data:`HUGE_TEXT_CHARS` characters are always estimated from their size.
    """
    enc = _tiktoken_encoder(encoding)
    if enc is None or len(text) > HUGE_TEXT_CHARS:
        return estimate_tokens(text)
    return len(enc.encode(text, disallowed_special=()))


def tokenizer_name(encoding: str = "o200k_base") -> str:
    """Which counter :func:`count_tokens` uses: ``"tiktoken:<encoding>"`` or ``"estimate"``."""
    return f"tiktoken:{encoding}" if _tiktoken_encoder(encoding) is not None else "estimate"
