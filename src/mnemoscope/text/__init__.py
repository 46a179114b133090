"""Text processing shared by every layer that ranks words: the Porter stemmer.

The stemmer matches SQLite FTS5's ``porter`` tokenizer, so the in-process indexes (the native
long-term store's BM25F and the context engine's recall index) stem exactly as FTS5 would.
"""

from __future__ import annotations

from mnemoscope.text._stem import stem

__all__ = ["stem"]
