"""Exceptions raised by mnemoscope.

The tree::

    MnemoscopeError
    ├── UserError                 misconfiguration; raised at construction, names the fix
    │   └── MissingExtraError     an optional dependency is not installed (also an ImportError)
    ├── ValidationError           malformed input data (JSON, tool input, frontmatter)
    ├── PermissionDeniedError     a tool call was denied by the permission engine
    ├── WorkspaceError            a workspace/backend file operation failed (workspace module)
    │   ├── PathDeniedError       the path is outside the allowed roots (also PermissionDenied)
    │   ├── WorkspaceFileNotFoundError
    │   ├── FileChangedError      the file changed since it was read (read it again)
    │   └── EditMatchError        Edit's old_string matched zero or several times
    ├── MemoryStoreError          a memory backend failed; the stored data is intact
    │   ├── CorruptRecordError    a stored record could not be decoded (carries its id)
    │   └── MemoryExtractionError the extraction reply could not be parsed; nothing stored
    └── AgentRunError             an error while an agent runs
        ├── ModelCallError        the chat model call failed
        └── MaxItersExceeded      (informational) the loop hit ``max_iters``

Tool errors never raise out of the agent loop: they become tool results the model reads.
"""

from __future__ import annotations


class MnemoscopeError(Exception):
    """Root of every exception raised by mnemoscope."""


class UserError(MnemoscopeError):
    """The framework was configured wrongly; the message names the parameter and the fix."""


class MissingExtraError(UserError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


class ValidationError(MnemoscopeError, ValueError):
    """Input data did not validate (malformed JSON, bad tool input, bad frontmatter)."""


class PermissionDeniedError(MnemoscopeError):
    """A tool call was denied by the permission engine."""


class MemoryStoreError(MnemoscopeError):
    """A memory backend operation failed. What was stored before is left intact."""


class CorruptRecordError(MemoryStoreError):
    """A stored record could not be decoded.

    Attributes:
        record_id: the id of the offending record, so it can be inspected or deleted.
    """

    def __init__(self, record_id: str, reason: str) -> None:
        super().__init__(f"stored record {record_id!r} is corrupt: {reason}")
        self.record_id = record_id
        self.reason = reason


class AgentRunError(MnemoscopeError):
    """An error raised while an agent runs."""


class ModelCallError(AgentRunError):
    """The chat model call failed.

    Attributes:
        status_code: the HTTP status when the provider answered with an error.
    """

    status_code: int | None = None


class MemoryExtractionError(MemoryStoreError):
    """The model's fact-extraction reply could not be parsed, so nothing was stored.

    Told apart from "nothing new to store" (a well-formed, empty extraction), which is
    not an error.
    """


__all__ = [
    "AgentRunError",
    "CorruptRecordError",
    "MemoryExtractionError",
    "MemoryStoreError",
    "MissingExtraError",
    "MnemoscopeError",
    "ModelCallError",
    "PermissionDeniedError",
    "UserError",
    "ValidationError",
]
