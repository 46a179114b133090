"""What the automatic retrieval of :class:`~mnemoscope.middleware.AgenticMemoryMiddleware`
picks: one part of the middleware.

:class:`MemorySelector` chooses the memory files relevant to a message from one scan of
the memory directory: the BM25 ranker alone (``selection="local"``), or the ranker
narrowing the candidates to a manifest from which the retrieval model chooses by
structured output (``"llm"``; the ranker again when the model fails). The chosen files are
read and cut to a token budget. The middleware runs it in a task owned by the reply and
injects the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mnemoscope.errors import MnemoscopeError
from mnemoscope.memory.markdown import (
    MEMORY_DIRNAME,
    MemoryFile,
    MemorySelection,
    MemoryStore,
    ScanResult,
    render_manifest,
)
from mnemoscope.message import Msg, SystemMsg, UserMsg
from mnemoscope.model import count_tokens

if TYPE_CHECKING:
    from mnemoscope.model import ChatModelBase

LOCAL_MIN_SCORE_RATIO = 0.25
"""``selection="local"`` keeps files scoring at least this fraction of the best score."""


@dataclass
class RetrievalResult:
    """What one reply's retrieval found."""

    files: list[tuple[MemoryFile, str]] = field(default_factory=list)
    mode: str = "llm"
    candidates: int = 0
    total: int = 0
    fallback_reason: str = ""


class SelectionKnobs(Protocol):
    """The middleware's settings a selection reads (at each selection)."""

    selection: Literal["llm", "local"]
    max_selected: int
    manifest_max_files: int
    retrieval_instructions: str
    hint_max_tokens_per_file: int


class MemorySelector:
    """Selects the memory files for a message.

    Args:
        store: the memory directory.
        knobs: where the selection settings are read (the middleware itself).
    """

    def __init__(self, store: MemoryStore, knobs: SelectionKnobs) -> None:
        self._store = store
        self._knobs = knobs

    async def select(
        self, query: str, scan: ScanResult, model: ChatModelBase | None
    ) -> RetrievalResult:
        valid = scan.valid
        result = RetrievalResult(mode=self._knobs.selection, total=len(valid))
        if not valid:
            return result
        ranker = await self._store.ranker_async(scan)
        by_name = scan.valid_by_name
        if self._knobs.selection == "local" or model is None:
            ranked = ranker.search(query, k=self._knobs.max_selected)
            top = ranked[0][1] if ranked else 0.0
            chosen = [key for key, score in ranked if score >= top * LOCAL_MIN_SCORE_RATIO]
            result.mode = "local"
            result.candidates = len(valid)
        else:
            candidates = self.candidates(query, scan, ranker)
            result.candidates = len(candidates)
            try:
                chosen = await self._ask_model(model, query, candidates)
            except (MnemoscopeError, ValueError) as exc:
                # the memories are still useful: fall back to the ranker, and say so
                ranked = ranker.search(query, k=self._knobs.max_selected)
                chosen = [key for key, _ in ranked]
                result.mode = "local"
                result.fallback_reason = f"{type(exc).__name__}: {exc}"
        result.files = await self._load(chosen, by_name)
        return result

    def candidates(self, query: str, scan: ScanResult, ranker: Any) -> list[MemoryFile]:
        valid = scan.valid
        if len(valid) <= self._knobs.manifest_max_files:
            return sorted(valid, key=lambda f: -(f.mtime or 0.0))
        by_name = scan.valid_by_name
        picked = [by_name[k] for k, _ in ranker.search(query, k=self._knobs.manifest_max_files)]
        if len(picked) < self._knobs.manifest_max_files:
            seen = {f.filename for f in picked}
            newest = sorted(valid, key=lambda f: -(f.mtime or 0.0))
            picked += [f for f in newest if f.filename not in seen][
                : self._knobs.manifest_max_files - len(picked)
            ]
        return picked

    async def _ask_model(
        self, model: ChatModelBase, query: str, candidates: list[MemoryFile]
    ) -> list[str]:
        manifest = render_manifest(candidates)
        messages: list[Msg] = [
            SystemMsg(
                self._knobs.retrieval_instructions.replace(
                    "{max_selected}", str(self._knobs.max_selected)
                )
            ),
            UserMsg("user", f"User message:\n{query}\n\nMemory files:\n{manifest}"),
        ]
        selection = await model.generate_structured_output(messages, MemorySelection)
        allowed = {f.filename for f in candidates}
        chosen: list[str] = []
        for name in selection.selected_files:
            name = name.strip().lstrip("./")
            if name.startswith(f"{MEMORY_DIRNAME}/"):
                name = name[len(MEMORY_DIRNAME) + 1 :]
            if name in allowed and name not in chosen:
                chosen.append(name)
        return chosen[: self._knobs.max_selected]

    async def _load(
        self, chosen: list[str], by_name: dict[str, MemoryFile]
    ) -> list[tuple[MemoryFile, str]]:
        out = []
        for name in chosen[: self._knobs.max_selected]:
            try:
                text = await self._store.read_text(name)
            except (FileNotFoundError, MnemoscopeError, OSError):
                continue  # removed since the scan
            out.append(
                (by_name[name], _truncate_tokens(text, self._knobs.hint_max_tokens_per_file))
            )
        return out


def _truncate_tokens(text: str, max_tokens: int) -> str:
    n = count_tokens(text)
    if n <= max_tokens:
        return text
    cut = int(len(text) * max_tokens / n)
    while cut > 0 and count_tokens(text[:cut]) > max_tokens:
        cut = int(cut * 0.9)
    return text[:cut].rstrip() + "\n[... truncated; Read the file for the rest]"
