"""Evidence-in-context recall on LoCoMo: the window alone vs compaction vs window + recall.

Usage::

    python bench/context_recall.py --data ../shared/data/locomo_dev.json
        [--budgets 2000 4000 8000] [--json OUT] [--limit-convs N] [--recall-share 0.5]

Each conversation is replayed as one session in an :class:`InMemoryMemory` (speaker A as
the user, speaker B as the assistant, the session date as the timestamp, one second a
turn). Then, for every question with evidence (categories 1-4), the benchmark builds the
model input a reply to that question would get, through the agent's own context engine
(``Agent.context.load`` + ``Agent.context.build``, nothing stored), and counts the share of
the question's evidence turns whose text is in that input (system prompt, summary,
history, recalled turns). Three strategies, per token budget:

* ``window``: ``Agent(max_context_tokens=B)``, today's behaviour (oldest history dropped);
* ``compaction``: ``ContextPolicy(window_tokens=B, summarizer=ExtractiveSummarizer())``,
  the session compacted as it is replayed (the deterministic stand-in summariser keeps a
  160-character fact line per turn: the mechanics are measured, not summary quality);
* ``recall``: ``ContextPolicy(window_tokens=B, recall_tokens=B * recall_share)``: the
  window plus the dropped turns most relevant to the question (BM25), within the budget;
* ``compaction+recall``: both (recall searches the compacted turns too).

The recall share (0.5) was fixed before any run and is not tuned to the dev questions.
Build time is the time of ``context.build`` (the model input of one call); the reference
line is the window alone, measured in the same run. The benchmark prints markdown tables
and never asserts. The data is read from ``--data``, never copied.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mnemoscope.agent import Agent
from mnemoscope.context import ContextPolicy, ExtractiveSummarizer
from mnemoscope.memory import InMemoryMemory
from mnemoscope.message import Msg
from mnemoscope.middleware import ReplyContext
from mnemoscope.testing import ScriptedChatModel

CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
STRATEGIES = ("window", "compaction", "recall", "compaction+recall")
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
SYSTEM = "You are a helpful assistant. Answer from the conversation."


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    when: datetime


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    speaker_a: str
    questions: list[tuple[str, int, set[str]]]


def _date(text: str, fallback: datetime) -> datetime:
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B, %Y"):
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return fallback


def load(path: Path, limit: int | None) -> list[Conversation]:
    out = []
    for sample in json.loads(path.read_text())[:limit]:
        conv = sample["conversation"]
        turns: list[Turn] = []
        n = 1
        last = datetime(2023, 1, 1, tzinfo=UTC)
        while f"session_{n}" in conv:
            start = _date(conv.get(f"session_{n}_date_time", ""), last + timedelta(days=1))
            for i, t in enumerate(conv[f"session_{n}"]):
                text = t["text"]
                if t.get("blip_caption"):
                    text += f" [shares {t['blip_caption']}]"
                turns.append(Turn(t["dia_id"], t["speaker"], text, start + timedelta(seconds=i)))
            last = start
            n += 1
        qs = []
        for q in sample["qa"]:
            ev = {
                f"D{a}:{int(b)}"
                for item in q.get("evidence", [])
                for a, b in _EVIDENCE.findall(str(item))
            }
            if ev and int(q["category"]) in CATEGORIES:
                qs.append((q["question"], int(q["category"]), ev))
        out.append(Conversation(sample["sample_id"], turns, conv["speaker_a"], qs))
    return out


def policy_for(strategy: str, budget: int, recall_share: float) -> ContextPolicy:
    if strategy == "window":
        return ContextPolicy.from_max_tokens(budget)
    if strategy == "compaction":
        return ContextPolicy(window_tokens=budget, summarizer=ExtractiveSummarizer())
    if strategy == "recall":
        return ContextPolicy(window_tokens=budget, recall_tokens=int(budget * recall_share))
    return ContextPolicy(
        window_tokens=budget,
        summarizer=ExtractiveSummarizer(),
        recall_tokens=int(budget * recall_share),
    )


def _msg(t: Turn, speaker_a: str) -> Msg:
    role = "user" if t.speaker == speaker_a else "assistant"
    return Msg(
        name=t.speaker, role=role, content=t.text, timestamp=t.when, metadata={"dia_id": t.dia_id}
    )


def _input_text(messages: list[Msg]) -> str:
    parts = []
    for m in messages:
        parts.append(m.get_text_content())
        parts.extend(h.hint for h in m.hints)
    return "\n".join(parts)


async def run_one(
    conv: Conversation, strategy: str, budget: int, recall_share: float
) -> dict[str, Any]:
    memory = InMemoryMemory()
    agent = Agent(
        "assistant",
        SYSTEM,
        ScriptedChatModel(default="ok"),
        memory=memory,
        context_policy=policy_for(strategy, budget, recall_share),
    )
    # replay: store the turns; a compacting agent compacts as a reply would (every
    # 10 turns, the load at the start of a reply)
    batch: list[Msg] = []
    for i, t in enumerate(conv.turns, 1):
        batch.append(_msg(t, conv.speaker_a))
        if i % 10 == 0 or i == len(conv.turns):
            await memory.add(batch)
            batch = []
            if "compaction" in strategy:
                async for _ in agent.context.load(ReplyContext(agent=agent, input=batch_msg())):
                    pass
    texts = {t.dia_id: t.text for t in conv.turns}
    hits: dict[int, list[float]] = defaultdict(list)
    tokens: list[int] = []
    seconds: list[float] = []
    for question, category, evidence in conv.questions:
        ctx = ReplyContext(
            agent=agent, input=Msg(name=conv.speaker_a, role="user", content=question)
        )
        async for _ in agent.context.load(ctx):
            pass
        ctx.system_prompt = SYSTEM
        started = time.perf_counter()
        built, _ = agent.context.build(ctx, 1)
        seconds.append(time.perf_counter() - started)
        tokens.append(built.tokens)
        shown = _input_text(built.messages)
        found = [e for e in evidence if e in texts and texts[e] in shown]
        known = [e for e in evidence if e in texts]
        if known:
            hits[category].append(len(found) / len(known))
    return {"hits": hits, "tokens": tokens, "seconds": seconds, "turns": len(conv.turns)}


def batch_msg() -> Msg:
    return Msg(name="bench", role="user", content="(replay checkpoint)")


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(int(p * len(s)), len(s) - 1)]


async def amain(args: argparse.Namespace) -> list[dict[str, Any]]:
    convs = load(Path(args.data), args.limit_convs)
    rows = []
    for budget in args.budgets:
        for strategy in STRATEGIES:
            hits: dict[int, list[float]] = defaultdict(list)
            tokens: list[int] = []
            seconds: list[float] = []
            for conv in convs:
                r = await run_one(conv, strategy, budget, args.recall_share)
                for c, v in r["hits"].items():
                    hits[c].extend(v)
                tokens += r["tokens"]
                seconds += r["seconds"]
            overall = [v for c in CATEGORIES for v in hits[c]]
            rows.append(
                {
                    "budget": budget,
                    "strategy": strategy,
                    "per_category": {
                        CATEGORY_NAMES[c]: statistics.fmean(hits[c]) if hits[c] else None
                        for c in CATEGORIES
                    },
                    "overall": statistics.fmean(overall) if overall else None,
                    "questions": len(overall),
                    "input_tokens_p50": statistics.median(tokens),
                    "build_ms_p50": pct(seconds, 0.5) * 1000,
                    "build_ms_p95": pct(seconds, 0.95) * 1000,
                }
            )
    turns = [len(c.turns) for c in convs]
    print(f"### Evidence-in-context recall: {args.data}")
    print(
        f"{len(convs)} conversations ({min(turns)}-{max(turns)} turns), "
        f"{rows[0]['questions']} questions (categories 1-4)\n"
    )
    head = "| budget | strategy | " + " | ".join(CATEGORY_NAMES[c] for c in CATEGORIES)
    print(head + " | overall | input tokens p50 | build ms p50 | build ms p95 |")
    print("|" + "---|" * (len(CATEGORIES) + 6))
    for r in rows:
        cats = " | ".join(f"{v:.3f}" if v is not None else "-" for v in r["per_category"].values())
        print(
            f"| {r['budget']} | {r['strategy']} | {cats} | {r['overall']:.3f} | "
            f"{r['input_tokens_p50']:.0f} | {r['build_ms_p50']:.2f} | {r['build_ms_p95']:.2f} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="a LoCoMo-format JSON file")
    parser.add_argument("--budgets", type=int, nargs="+", default=[2000, 4000, 8000])
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--limit-convs", type=int, default=None)
    parser.add_argument("--recall-share", type=float, default=0.5)
    args = parser.parse_args()
    rows = asyncio.run(amain(args))
    if args.json:
        Path(args.json).write_text(json.dumps({"data": args.data, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
