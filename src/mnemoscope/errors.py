"""Exceptions raised by mnemoscope: every public one is defined here.

The tree::

    MnemoscopeError
    ├── UserError                   misconfiguration; raised at construction, names the fix
    │   ├── MissingExtraError       an optional dependency is not installed (also an ImportError)
    │   ├── PinBudgetError          pinned messages need more than ContextPolicy.pin_tokens
    │   └── CLIUsageError           a ``mnemoscope`` command was called wrongly
    ├── ValidationError             malformed input data (JSON, tool input; also a ValueError)
    ├── PermissionDeniedError       a tool call was denied by the permission engine
    ├── WorkspaceError              a workspace file operation failed (carries a ``code``)
    │   ├── PathDeniedError         outside the allowed roots (also a PermissionDeniedError)
    │   ├── WorkspaceFileNotFoundError  no such file (also a FileNotFoundError)
    │   ├── FileChangedError        the file changed since it was read (read it again)
    │   └── EditMatchError          Edit's old_string matched zero or several times
    ├── MemoryStoreError            a memory backend failed; the stored data is intact
    │   ├── CorruptRecordError      a stored record could not be decoded (carries its id)
    │   └── MemoryExtractionError   the extraction reply could not be parsed; nothing stored
    ├── ServiceStoreError           the service's store (Redis, PostgreSQL) failed; HTTP 503
    └── AgentRunError               an error while an agent runs
        └── ModelCallError          the chat model call failed

Each package re-exports its own (``mnemoscope.workspace.WorkspaceError``,
``mnemoscope.context.PinBudgetError``, ``mnemoscope.service.ServiceStoreError``). Hitting
``max_iters`` is not an error: the reply ends with ``exit_reason == "max_iters"``. Tool errors
never raise out of the agent loop: they become tool results the model reads.

Not in the tree, on purpose: ``mnemoscope.workspace.FsError`` is the wire format of the file
operations, which also run inside sandboxes without mnemoscope installed, and becomes a
:class:`WorkspaceError` at the backend; a few module-private signals (an HTTP status inside
the service and the inspector) never leave the module that raises them.
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


class PinBudgetError(UserError):
    """The pinned messages need more tokens than ``ContextPolicy.pin_tokens`` allows."""


class CLIUsageError(UserError):
    """A command was called wrongly; the message says how to call it."""


class WorkspaceError(MnemoscopeError):
    """A backend operation failed. ``code`` is one of ``denied``, ``not_found``,
    ``is_directory``, ``conflict``, ``no_match``, ``multiple_matches``, ``too_large``,
    ``binary``, ``invalid``, ``read_only``, ``io``, ``unavailable``, ``too_slow`` (a
    grep ran over its time limit)."""

    def __init__(self, message: str, code: str = "io") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class PathDeniedError(WorkspaceError, PermissionDeniedError):
    """The path is outside the allowed roots, not a regular file, or malformed."""


class WorkspaceFileNotFoundError(WorkspaceError, FileNotFoundError):
    """The file or directory does not exist."""


class FileChangedError(WorkspaceError):
    """The file changed since the version the caller expected (read it again)."""


class EditMatchError(WorkspaceError):
    """``old_string`` was not found, or found more than once without ``replace_all``."""


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


class ServiceStoreError(MnemoscopeError):
    """The service store (Redis, PostgreSQL) could not be reached or refused a command;
    requests that need it answer 503."""


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
    "CLIUsageError",
    "CorruptRecordError",
    "EditMatchError",
    "FileChangedError",
    "MemoryExtractionError",
    "MemoryStoreError",
    "MissingExtraError",
    "MnemoscopeError",
    "ModelCallError",
    "PathDeniedError",
    "PermissionDeniedError",
    "PinBudgetError",
    "ServiceStoreError",
    "UserError",
    "ValidationError",
    "WorkspaceError",
    "WorkspaceFileNotFoundError",
]
