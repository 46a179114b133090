"""Context building: the model input of one call, under a token budget."""

from mnemoscope.context._builder import (
    PER_MESSAGE_OVERHEAD,
    BuiltContext,
    ContextBuilder,
    omission_notice,
    sanitize_history,
)

__all__ = [
    "PER_MESSAGE_OVERHEAD",
    "BuiltContext",
    "ContextBuilder",
    "omission_notice",
    "sanitize_history",
]
