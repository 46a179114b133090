"""The Markdown memory engine: a directory of Markdown files with a ``MEMORY.md`` index.

One public API for everything that reads or writes that directory: the agentic memory
middleware, the ``mnemoscope memory`` CLI and the inspector. The store reaches files only
through a workspace backend, so the same engine serves local and sandboxed workspaces.
"""

from __future__ import annotations

from mnemoscope.memory.markdown._doctor import (
    DoctorReport,
    Finding,
    diagnose,
    rebuild_index,
    repair,
)
from mnemoscope.memory.markdown._files import (
    INDEX_FILENAME,
    MEMORY_DIRNAME,
    MEMORY_TYPES,
    IndexEntry,
    IndexSnapshot,
    IndexView,
    MemoryFile,
    ScanResult,
    bound_index,
    format_age,
    parse_frontmatter,
    parse_index,
    parse_memory_file,
    render_memory_file,
)
from mnemoscope.memory.markdown._prompt import (
    DEFAULT_MEMORY_INSTRUCTIONS,
    DEFAULT_RETRIEVAL_INSTRUCTIONS,
    MemorySelection,
    render_hint,
    render_index_section,
    render_manifest,
)
from mnemoscope.memory.markdown._ranker import BM25Ranker, RankerDoc, tokenize
from mnemoscope.memory.markdown._store import (
    DEFAULT_FULL_CHECK_INTERVAL,
    MAX_INDEX_BYTES,
    MAX_INDEX_LINE_CHARS,
    MemoryStore,
    check_full_check_interval,
)
from mnemoscope.memory.markdown._walk import MAX_MEMORY_FILE_BYTES

__all__ = [
    "DEFAULT_FULL_CHECK_INTERVAL",
    "DEFAULT_MEMORY_INSTRUCTIONS",
    "DEFAULT_RETRIEVAL_INSTRUCTIONS",
    "INDEX_FILENAME",
    "MAX_INDEX_BYTES",
    "MAX_INDEX_LINE_CHARS",
    "MAX_MEMORY_FILE_BYTES",
    "MEMORY_DIRNAME",
    "MEMORY_TYPES",
    "BM25Ranker",
    "DoctorReport",
    "Finding",
    "IndexEntry",
    "IndexSnapshot",
    "IndexView",
    "MemoryFile",
    "MemorySelection",
    "MemoryStore",
    "RankerDoc",
    "ScanResult",
    "bound_index",
    "check_full_check_interval",
    "diagnose",
    "format_age",
    "parse_frontmatter",
    "parse_index",
    "parse_memory_file",
    "rebuild_index",
    "render_hint",
    "render_index_section",
    "render_manifest",
    "render_memory_file",
    "repair",
    "tokenize",
]
