"""Importing the model and embedding packages does not import the provider SDKs or torch."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import mnemoscope.embedding, mnemoscope.model, mnemoscope.testing
names = ("openai", "anthropic", "torch", "sentence_transformers")
heavy = sorted(m for m in names if m in sys.modules)
print(",".join(heavy))
from mnemoscope.model import AnthropicChatModel, OpenAIChatModel
print("openai" in sys.modules)
"""


def test_providers_are_imported_on_first_use() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    assert out == ["", "True"]
