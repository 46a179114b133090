"""The context policy: one object that says how big the model input may get and what
happens as it fills.

Example::

    policy = ContextPolicy(
        window_tokens=32_000,        # the model's context window
        answer_reserve=2_000,        # left free for the answer
        compact_trigger=0.8,         # compact when history passes 80 % of its share
        summarizer=ModelSummarizer(OpenAIChatModel("gpt-4o-mini")),  # cheaper model
    )
    agent = Agent(..., context_policy=policy)

``Agent(max_context_tokens=N)`` is ``ContextPolicy(window_tokens=N, answer_reserve=0)``
with no summariser (today's behaviour: the oldest history is dropped, with a notice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mnemoscope.errors import UserError

if TYPE_CHECKING:
    from mnemoscope.context._compaction import SummarizerBase

SUMMARY_MARK = "summary"
"""Mark of a stored summary message (its ``metadata["covers"]`` lists what it covers)."""
COMPRESSED_MARK = "compressed"
"""Mark of a stored message a summary covers; it stays stored and searchable."""
PINNED_MARK = "pinned"
"""Mark of a message kept in every context, within :attr:`ContextPolicy.pin_tokens`."""
COVERS_KEY = "covers"
"""Metadata key of a summary: the ids of exactly the messages it covers."""


@dataclass(frozen=True)
class ContextPolicy:
    """How the model input is budgeted, compacted, offloaded and recalled.

    Attributes:
        window_tokens: the model's context window (``None``: no budget at all; nothing
            is dropped or compacted automatically; the parts are still counted for the
            ``ContextEvent``).
        answer_reserve: tokens kept free for the answer; the input budget is
            ``window_tokens - answer_reserve``.
        compact_trigger: share of the input budget that history may fill before the
            oldest part is compacted (needs a ``summarizer``).
        compact_keep: share of the input budget kept verbatim (the uncompacted tail)
            after a compaction.
        summarizer: writes summaries (:class:`ModelSummarizer` over a cheaper model,
            :class:`ExtractiveSummarizer` with no model); ``None``: no compaction, the
            budget drops the oldest history with a notice.
        summarizer_timeout: seconds a summary may take; past it nothing is compacted.
        summary_tokens: most tokens a summary may take (``None``: 15 % of the input
            budget); a longer one loses its oldest fact lines, then is cut.
        background_compaction: compact after a reply, in the background, instead of at
            the start of the next one.
        compaction_wait: seconds the next reply waits for a background compaction still
            running before it goes on without it.
        system_tokens: budget of the system prompt (with the memory index); only
            reported against, the prompt is never cut.
        memory_tokens: budget of injected long-term memory (reported against).
        recall_tokens: budget of automatically recalled history (0: no automatic recall).
        pin_tokens: budget of pinned messages (:class:`PinBudgetError` when exceeded).
        tool_results_share: share of the input budget the results of one step share.
        tool_result_chars: most characters one tool result may send (``None``: the
            toolkit's ``max_output_chars``).
        clear_tool_results_after: tool-result messages of history further back than
            this many tool-result messages are shown as stubs (``None``: never).
        clear_exclude_tools: tools whose results are never cleared to stubs.
    """

    window_tokens: int | None = None
    answer_reserve: int = 0
    compact_trigger: float = 0.8
    compact_keep: float = 0.4
    summarizer: SummarizerBase | None = None
    summarizer_timeout: float = 60.0
    summary_tokens: int | None = None
    background_compaction: bool = False
    compaction_wait: float = 5.0
    system_tokens: int | None = None
    memory_tokens: int | None = None
    recall_tokens: int = 0
    pin_tokens: int = 2_000
    tool_results_share: float = 0.25
    tool_result_chars: int | None = None
    clear_tool_results_after: int | None = None
    clear_exclude_tools: Sequence[str] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.window_tokens is not None and self.window_tokens < 1:
            raise UserError(
                f"ContextPolicy.window_tokens must be None or >= 1, got {self.window_tokens}"
            )
        if self.answer_reserve < 0 or (
            self.window_tokens is not None and self.answer_reserve >= self.window_tokens
        ):
            raise UserError(
                f"ContextPolicy.answer_reserve must be >= 0 and below window_tokens, "
                f"got {self.answer_reserve}"
            )
        for name in ("compact_trigger", "compact_keep", "tool_results_share"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise UserError(f"ContextPolicy.{name} must be in (0, 1], got {value}")
        if self.compact_keep >= self.compact_trigger:
            raise UserError(
                "ContextPolicy.compact_keep must be below compact_trigger (what is kept "
                f"after a compaction must fit under the trigger), got {self.compact_keep} "
                f">= {self.compact_trigger}"
            )
        if self.summary_tokens is not None and self.summary_tokens < 16:
            raise UserError(
                f"ContextPolicy.summary_tokens must be None or >= 16, got {self.summary_tokens}"
            )
        for name in ("recall_tokens", "pin_tokens"):
            if getattr(self, name) < 0:
                raise UserError(f"ContextPolicy.{name} must be >= 0, got {getattr(self, name)}")
        if self.summarizer_timeout <= 0 or self.compaction_wait < 0:
            raise UserError("ContextPolicy.summarizer_timeout must be > 0 and compaction_wait >= 0")
        if self.clear_tool_results_after is not None and self.clear_tool_results_after < 0:
            raise UserError(
                "ContextPolicy.clear_tool_results_after must be None or >= 0, "
                f"got {self.clear_tool_results_after}"
            )
        if isinstance(self.clear_exclude_tools, str):
            raise UserError(
                "ContextPolicy.clear_exclude_tools takes a list of tool names, not a string"
            )

    @property
    def input_tokens(self) -> int | None:
        """Budget of one model input (``window_tokens - answer_reserve``)."""
        if self.window_tokens is None:
            return None
        return self.window_tokens - self.answer_reserve

    @property
    def summary_budget(self) -> int | None:
        """Tokens a summary may take."""
        if self.summary_tokens is not None:
            return self.summary_tokens
        budget = self.input_tokens
        return None if budget is None else max(int(budget * 0.15), 64)

    @property
    def compacts(self) -> bool:
        """Whether this policy compacts (a budget and a summariser)."""
        return self.window_tokens is not None and self.summarizer is not None

    @classmethod
    def from_max_tokens(cls, max_context_tokens: int | None) -> ContextPolicy:
        """The policy of ``Agent(max_context_tokens=N)``: budget only, no compaction."""
        return cls(window_tokens=max_context_tokens)
