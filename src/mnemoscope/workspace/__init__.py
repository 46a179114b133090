"""Workspaces and backends: where the agent's files live and its commands run.

``LocalBackend`` (the default) works on this machine; ``BubblewrapWorkspace`` is a local
sandbox; ``DockerWorkspace`` and ``E2BWorkspace`` run in a container or a cloud sandbox.
Every backend runs the same file operations (``_fsops``): confined to ``roots``,
atomic, locked, encoding- and line-ending-preserving.
"""

from mnemoscope.workspace._base import (
    ABSENT,
    BackendBase,
    DirEntry,
    EditMatchError,
    ExecResult,
    FileChangedError,
    FileContent,
    FileStat,
    GrepMatch,
    GrepResult,
    PathDeniedError,
    WorkspaceBase,
    WorkspaceError,
    WorkspaceFileNotFoundError,
    WriteResult,
    make_error,
)
from mnemoscope.workspace._bubblewrap import BubblewrapBackend, BubblewrapWorkspace
from mnemoscope.workspace._docker import DockerBackend, DockerWorkspace
from mnemoscope.workspace._e2b import E2BBackend, E2BWorkspace
from mnemoscope.workspace._fsops import FsError, decode_text, fd_path, is_weak_version
from mnemoscope.workspace._fsops import dispatch as dispatch_fsop
from mnemoscope.workspace._fsops_text import split_lines
from mnemoscope.workspace._local import LocalBackend, LocalWorkspace

__all__ = [
    "ABSENT",
    "BackendBase",
    "BubblewrapBackend",
    "BubblewrapWorkspace",
    "DirEntry",
    "DockerBackend",
    "DockerWorkspace",
    "E2BBackend",
    "E2BWorkspace",
    "EditMatchError",
    "ExecResult",
    "FileChangedError",
    "FileContent",
    "FileStat",
    "FsError",
    "GrepMatch",
    "GrepResult",
    "LocalBackend",
    "LocalWorkspace",
    "PathDeniedError",
    "WorkspaceBase",
    "WorkspaceError",
    "WorkspaceFileNotFoundError",
    "WriteResult",
    "decode_text",
    "dispatch_fsop",
    "fd_path",
    "is_weak_version",
    "make_error",
    "split_lines",
]
