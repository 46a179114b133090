"""Offline testing helpers shipped with mnemoscope, so users can test their agents too.

* :class:`ScriptedChatModel` replays queued responses (tool calls included) and records
  every input it was given.
* :class:`OpenAICompatServer` is a real local HTTP server speaking the OpenAI
  chat-completions (JSON and SSE) and embeddings APIs, driven by a script of replies.
* :class:`HashEmbeddingModel` is a deterministic feature-hashing embedder.
"""

from mnemoscope.testing._hash_embedding import HashEmbeddingModel, hash_embedding
from mnemoscope.testing._pairs import assert_tool_pairs
from mnemoscope.testing._scripted import ScriptedCall, ScriptedChatModel, tool_call
from mnemoscope.testing._server import (
    HTTPErrorReply,
    OpenAICompatServer,
    RecordedRequest,
    ServerReply,
    ServerToolCall,
)

__all__ = [
    "HTTPErrorReply",
    "HashEmbeddingModel",
    "OpenAICompatServer",
    "RecordedRequest",
    "ScriptedCall",
    "ScriptedChatModel",
    "ServerReply",
    "ServerToolCall",
    "assert_tool_pairs",
    "hash_embedding",
    "tool_call",
]
