"""Context building: the model input of one call, under a token budget.

The :class:`ContextPolicy` says how big the input may get; past its trigger the oldest
history is compacted into a ``summary``-marked message (originals kept, marked
``compressed``), old tool results become stubs, and what was cut stays searchable
(:class:`RecallIndex`, the ``recall`` tool).
"""

from mnemoscope.context._builder import (
    PER_MESSAGE_OVERHEAD,
    BuildOptions,
    BuiltContext,
    ContextBuilder,
    clear_old_results,
    group_history,
    omission_notice,
    sanitize_history,
)
from mnemoscope.context._compaction import (
    CompactionContext,
    ExtractiveSummarizer,
    ModelSummarizer,
    SummarizerBase,
    fit_summary,
    is_summary,
    plan_compaction,
    render_summary,
    split_summary,
    write_summary,
)
from mnemoscope.context._policy import (
    COMPRESSED_MARK,
    COVERS_KEY,
    PINNED_MARK,
    SUMMARY_MARK,
    ContextPolicy,
)
from mnemoscope.context._recall import RecallHit, RecallIndex, render_recalled, searchable_text
from mnemoscope.errors import PinBudgetError

__all__ = [
    "COMPRESSED_MARK",
    "COVERS_KEY",
    "PER_MESSAGE_OVERHEAD",
    "PINNED_MARK",
    "SUMMARY_MARK",
    "BuildOptions",
    "BuiltContext",
    "CompactionContext",
    "ContextBuilder",
    "ContextPolicy",
    "ExtractiveSummarizer",
    "ModelSummarizer",
    "PinBudgetError",
    "RecallHit",
    "RecallIndex",
    "SummarizerBase",
    "clear_old_results",
    "fit_summary",
    "group_history",
    "is_summary",
    "omission_notice",
    "plan_compaction",
    "render_recalled",
    "render_summary",
    "sanitize_history",
    "searchable_text",
    "split_summary",
    "write_summary",
]
