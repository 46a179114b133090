"""Agentic memory at scale: prompt, manifest and ranker cost; ranker recall on LoCoMo.

Part 1 — latency, for 10 / 100 / 1,000 / 10,000 memory files. A synthetic memory directory
(each file: YAML frontmatter + a ~400-byte body; ``MEMORY.md`` with one line per file)
is generated once per size in a temp dir, and both implementations read the same files:

* **system prompt**: what mnemoscope's middleware does for the system prompt of a one-step
  reply (``on_reply``: confinement, layout and change checks; ``on_reasoning``: the
  confinement check before the model call; ``on_system_prompt``: ``MEMORY.md`` under the
  200-line / 4,000-token budget with its omission note, and the invalid files of the latest
  completed scan). ``warm`` = nothing changed since the last reply (any background scan the
  reply starts is waited for and counted), ``cold`` = a new middleware, as in a new process,
  timed until the prompt is ready (the first scan runs on in the background). ``full
  check`` is one full scan (a stat of every file), which every reply used to start. Beside
  it AgentScope 2.0.11's ``on_system_prompt`` (reads ``MEMORY.md``, cuts it by tokens),
  which it runs about twice per model call, warm and as the first call of a new
  middleware; a last table checks the goals of issue 12 (warm <= 0.3 ms at 10,000 files,
  cold <= 5 ms at 1,000);
* **manifest**: what the selection model is shown: mnemoscope scans the directory (only
  changed files are parsed again: ``warm`` = nothing changed since the last reply,
  ``cold`` = fresh process), ranks with BM25 and keeps the best 100; AgentScope reads every
  file's frontmatter (``_list_md_files``) and keeps the newest 200 (``_format_manifest``);
* **ranker**: rebuilding the BM25 index after a change of the directory (terms of unchanged
  files are cached, so this is the postings only; the first build, which tokenizes every
  file, is part of ``manifest cold``) and one query.

Part 2 — recall of the local ranker on LoCoMo (``--locomo``, default
``/work/shared/data/locomo_dev.json``; the data is read from there, never copied). The
memory corpus is built per conversation (one user's memory directory): every session is
cut into groups of 5 consecutive turns and each group becomes one memory file: ``name`` =
"<speakers> session <n> part <k>", ``description`` = "Conversation on <session date>" plus
the group's first turn (cut at 150 characters), ``type`` = ``project``, body = the turns as
"<speaker>: <text>" (image captions appended). A question's relevant files are those
holding one of its evidence turns (ids normalised: ``D8:6; D9:17`` is two ids, ``D:11:26``
is ``D11:26``, ``D30:05`` is ``D30:5``). Questions of categories 1-4 are used (category 5,
adversarial, asks about things never said). Reported: recall@k (share of relevant files in
the top k, averaged over questions) for the ranker and, as a baseline, for the newest-first
order AgentScope uses to cap its manifest; ``manifest recall@100`` is the share of relevant
files that reach the selection model with mnemoscope's default ``manifest_max_files``.

Usage::

    python bench/agentic_memory.py                      # everything, markdown tables
    python bench/agentic_memory.py --sizes 10 100 --skip-agentscope --json out.json

The AgentScope side runs in its own virtualenv (``--as2-python`` or
``MNEMOSCOPE_AS2_PYTHON``, default ``/work/side/as2/bin/python``), made with::

    python -m venv /work/side/as2 && /work/side/as2/bin/pip install agentscope==2.0.11
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_AS2_PYTHON = "/work/side/as2/bin/python"
AS2_SETUP = "python -m venv /work/side/as2 && /work/side/as2/bin/pip install agentscope==2.0.11"
DEFAULT_LOCOMO = "/work/shared/data/locomo_dev.json"
QUERY = "what does the user prefer for travel plans in spring"
TOPICS = [
    "travel plans",
    "answer style",
    "project deadline",
    "favourite food",
    "home city",
    "dashboard link",
    "code review",
    "pet care",
    "running schedule",
    "book club",
]


# ------------------------------------------------------------------------ corpus
def make_corpus(root: Path, n: int) -> None:
    memdir = root / "Memory"
    memdir.mkdir(parents=True)
    lines = []
    base = time.time() - 86_400 * 30
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        name = f"mem_{i:05d}.md"
        body = (
            f"Fact {i} about {topic}: the user mentioned details number {i} during a session. "
            f"**Why:** it came up while discussing {topic} in week {i % 52}. "
            f"**How to apply:** consider it whenever {topic} comes up again; item {i * 7 % 101}."
        )
        (memdir / name).write_text(
            f"---\nname: {topic.title()} {i}\n"
            f"description: Read when the conversation turns to {topic} (note {i})\n"
            f"type: {['user', 'feedback', 'project', 'reference'][i % 4]}\n---\n\n{body}\n"
        )
        os.utime(memdir / name, (base + i, base + i))
        lines.append(f"- [{topic.title()} {i}]({name}) — {topic}, note {i}")
    (memdir / "MEMORY.md").write_text("\n".join(lines) + "\n")


def timed(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


# ------------------------------------------------------------------ mnemoscope
async def reply_prompt(mw: Any, agent: Any, *, settle: bool = True) -> str:
    """What the middleware does for the system prompt of a one-step reply: ``on_reply``
    (confinement and layout checks, the change check that may start a scan), ``on_reasoning``
    (the confinement check before the model call) and ``on_system_prompt``; with ``settle``
    also any background scan that started (so its cost is counted)."""
    from mnemoscope.message import UserMsg
    from mnemoscope.middleware import ReasoningContext, ReplyContext

    ctx = ReplyContext(agent=agent, input=UserMsg("u", QUERY))
    out: list[str] = []

    async def reasoning(rctx: Any) -> Any:
        out.append(await mw.on_system_prompt(rctx.reply, "You are helpful."))
        return
        yield  # an async generator, like the agent's reasoning phase

    async def inner(c: Any) -> Any:
        async for event in mw.on_reasoning(ReasoningContext(reply=c, iteration=0), reasoning):
            yield event

    async for _ in mw.on_reply(ctx, inner):
        pass
    if settle:
        await mw.store.settle()
    return out[0]


async def bench_mnemoscope(root: Path, repeat: int) -> dict[str, float]:
    from mnemoscope.agent import Agent
    from mnemoscope.memory.markdown._prompt import render_manifest
    from mnemoscope.memory.markdown._walk import RACY_WINDOW_NS
    from mnemoscope.middleware import AgenticMemoryMiddleware
    from mnemoscope.testing import ScriptedChatModel

    def fresh() -> tuple[Any, Any]:
        # retrieval off: its cost is the manifest column
        mw = AgenticMemoryMiddleware(workdir=str(root), retrieval=False)
        agent = Agent(
            name="a", system_prompt="You are helpful.", model=ScriptedChatModel(), middlewares=[mw]
        )
        return mw, agent

    out: dict[str, float] = {}
    # one-time process costs (tokenizer load, worker thread start) stay out of "cold"
    warm_root = Path(tempfile.mkdtemp(prefix="agm-bench-warmup-"))
    make_corpus(warm_root, 3)
    mw = AgenticMemoryMiddleware(workdir=str(warm_root), retrieval=False)
    agent = Agent(name="a", system_prompt="x", model=ScriptedChatModel(), middlewares=[mw])
    await reply_prompt(mw, agent)
    shutil.rmtree(warm_root, ignore_errors=True)
    # the corpus was just written: let the directory's timestamps leave the racy window
    await asyncio.sleep(3 * RACY_WINDOW_NS / 1e9)
    # cold: a new middleware (empty caches, no scan yet), as in a new process; timed until
    # the prompt is ready (the first scan goes on in the background, waited for untimed)
    cold_prompt, cold_cpu, cold_manifest = [], [], []
    for i in range(max(15, repeat)):
        mw, agent = fresh()
        t, c = time.perf_counter(), time.thread_time()
        await reply_prompt(mw, agent, settle=False)
        cold_prompt.append(time.perf_counter() - t)
        cold_cpu.append(time.thread_time() - c)
        await mw.store.settle()
        if i >= max(3, repeat // 3):
            continue
        mw, agent = fresh()
        t = time.perf_counter()
        scan = await mw.store.scan()
        ranker = mw.store.ranker(scan)
        render_manifest(mw._selector.candidates(QUERY, scan, ranker))
        cold_manifest.append(time.perf_counter() - t)
    # warm: the same middleware, nothing changed on disk since the last reply
    mw, agent = fresh()
    await reply_prompt(mw, agent)
    scans_before = mw.store.full_scans
    warm_prompt, warm_cpu = [], []
    for _ in range(repeat * 20):
        t, c = time.perf_counter(), time.process_time()
        await reply_prompt(mw, agent)
        warm_prompt.append(time.perf_counter() - t)
        warm_cpu.append(time.process_time() - c)
    out["warm_full_scans"] = mw.store.full_scans - scans_before
    # the previous behaviour, for reference: a full scan (a stat of every file) per reply
    full_check = []
    for _ in range(repeat):
        t = time.perf_counter()
        await mw.store.scan()
        full_check.append(time.perf_counter() - t)
    warm_manifest, build, query = [], [], []
    for _ in range(repeat):
        t = time.perf_counter()
        scan = await mw.store.refresh_if_stale()
        ranker = mw.store.ranker(scan)
        render_manifest(mw._selector.candidates(QUERY, scan, ranker))
        warm_manifest.append(time.perf_counter() - t)
        mw.store._ranker = None  # force a rebuild (terms stay cached) to time it
        t = time.perf_counter()
        ranker = mw.store.ranker(scan)
        build.append(time.perf_counter() - t)
        t = time.perf_counter()
        ranker.search(QUERY, k=100)
        query.append(time.perf_counter() - t)
    out["prompt_cold_ms"] = timed(cold_prompt)
    out["prompt_cold_cpu_ms"] = timed(cold_cpu)
    out["prompt_warm_ms"] = timed(warm_prompt)
    out["prompt_warm_cpu_ms"] = timed(warm_cpu)
    out["full_check_ms"] = timed(full_check)
    out["manifest_cold_ms"] = timed(cold_manifest)
    out["manifest_warm_ms"] = timed(warm_manifest)
    out["ranker_build_ms"] = timed(build)
    out["ranker_query_ms"] = timed(query)
    return out


# ------------------------------------------------------------------ AgentScope
AS2_WORKER = r"""
import asyncio, json, statistics, sys, time
from agentscope.middleware import AgenticMemoryMiddleware

async def main(root, repeat):
    # one-time process costs (imports, tokenizer) stay out of "first call", as ours do
    await AgenticMemoryMiddleware(workdir=root).on_system_prompt(None, "base")
    first = []
    for _ in range(max(3, repeat // 3)):
        mw = AgenticMemoryMiddleware(workdir=root)
        t = time.perf_counter()
        await mw.on_system_prompt(None, "base")
        first.append(time.perf_counter() - t)
    mw = AgenticMemoryMiddleware(workdir=root)
    prompt, manifest = [], []
    for _ in range(repeat * 5):
        t = time.perf_counter()
        await mw.on_system_prompt(None, "base")
        prompt.append(time.perf_counter() - t)
    for _ in range(repeat):
        t = time.perf_counter()
        mw._format_manifest(await mw._list_md_files())
        manifest.append(time.perf_counter() - t)
    med = lambda xs: statistics.median(xs) * 1000
    print(json.dumps({"prompt_ms": med(prompt), "prompt_first_ms": med(first),
                      "manifest_ms": med(manifest)}))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def bench_agentscope(python: str, root: Path, repeat: int) -> dict[str, float] | str:
    if not Path(python).exists():
        return f"AgentScope 2.0.11 not installed at {python}; create it with: {AS2_SETUP}"
    proc = subprocess.run(
        [python, "-c", AS2_WORKER, str(root), str(repeat)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        return f"AgentScope run failed: {proc.stderr.strip().splitlines()[-1:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------- LoCoMo
def _norm_ids(raw: list[str]) -> set[str]:
    out = set()
    for item in raw:
        for part in re.split(r"[;,\s]+", str(item)):
            m = re.match(r"D:?(\d+):(\d+)$", part.strip())
            if m:
                out.add(f"D{int(m.group(1))}:{int(m.group(2))}")
    return out


def locomo_corpus(sample: dict[str, Any], group: int = 5) -> tuple[list[Any], dict[str, str]]:
    """Memory files of one conversation and the turn id -> file name map."""
    from mnemoscope.memory.markdown._files import parse_memory_file, render_memory_file

    conv = sample["conversation"]
    speakers = f"{conv['speaker_a']} & {conv['speaker_b']}"
    files, where = [], {}
    n = 1
    while f"session_{n}" in conv:
        turns, date = conv[f"session_{n}"], conv.get(f"session_{n}_date_time", "")
        for k in range(0, len(turns), group):
            chunk = turns[k : k + group]
            name = f"s{n:02d}_p{k // group + 1:02d}.md"
            body = "\n".join(
                f"{t['speaker']}: {t['text']}"
                + (f" [image: {t['blip_caption']}]" if t.get("blip_caption") else "")
                for t in chunk
            )
            first = " ".join(chunk[0]["text"].split())[:150]
            text = render_memory_file(
                f"{speakers} session {n} part {k // group + 1}",
                f"Conversation on {date}: {first}",
                "project",
                body,
            )
            files.append(parse_memory_file(name, name, text, mtime=float(n * 1000 + k)))
            for t in chunk:
                where[f"D{n}:{int(t['dia_id'].split(':')[1])}"] = name
        n += 1
    return files, where


def bench_recall(path: str, ks: tuple[int, ...] = (1, 5, 10, 20)) -> dict[str, Any]:
    from mnemoscope.memory.markdown._ranker import BM25Ranker, RankerDoc

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    per_cat: dict[int, dict[str, list[float]]] = {}
    n_files = []
    for sample in data:
        files, where = locomo_corpus(sample)
        n_files.append(len(files))
        ranker = BM25Ranker(
            [RankerDoc(f.filename, f.name or "", f.description or "", f.body) for f in files]
        )
        newest = [f.filename for f in sorted(files, key=lambda f: -(f.mtime or 0))]
        for qa in sample["qa"]:
            cat = int(qa["category"])
            if cat == 5:
                continue
            relevant = {where[i] for i in _norm_ids(qa.get("evidence", [])) if i in where}
            if not relevant:
                continue
            ranked = [k for k, _ in ranker.search(qa["question"], k=100)]
            acc = per_cat.setdefault(cat, {})
            for k in ks:
                acc.setdefault(f"bm25@{k}", []).append(
                    len(relevant & set(ranked[:k])) / len(relevant)
                )
                acc.setdefault(f"newest@{k}", []).append(
                    len(relevant & set(newest[:k])) / len(relevant)
                )
            acc.setdefault("manifest@100", []).append(
                len(relevant & set(ranked[:100] + newest[: 100 - len(ranked)])) / len(relevant)
            )
    return {
        "files_per_conversation": n_files,
        "per_category": {
            c: {m: statistics.mean(v) for m, v in d.items()} | {"n": len(d["bm25@1"])}
            for c, d in sorted(per_cat.items())
        },
    }


# ---------------------------------------------------------------------- main
def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1_000, 10_000])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument(
        "--as2-python", default=os.environ.get("MNEMOSCOPE_AS2_PYTHON", DEFAULT_AS2_PYTHON)
    )
    parser.add_argument("--skip-agentscope", action="store_true")
    parser.add_argument("--locomo", default=DEFAULT_LOCOMO)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    results: dict[str, Any] = {"latency": {}, "recall": None}
    print(f"load average at start: {_loadavg()}\n")
    print("## Agentic memory latency (median ms; lower is better)\n")
    print(
        "Prompt = the middleware's work for the system prompt of a one-step reply "
        "(`on_reply` + `on_reasoning` + `on_system_prompt`, any background scan it starts "
        "included when warm). Full check = one full scan (a stat of every file), what every "
        "reply did before. AS2 prompt = AgentScope 2.0.11's `on_system_prompt` (reads "
        "`MEMORY.md`, cuts it by tokens), warm and first call of a new middleware. Prompt "
        "times are wall clock, with the CPU time of the process (warm; any worker thread "
        "included) or of the event-loop thread (cold; the first scan runs on after the "
        "prompt is ready) in brackets: on a loaded machine the difference is time spent "
        "descheduled.\n"
    )
    print(
        "| files | prompt warm | prompt cold | full check | AS2 prompt (warm / first) "
        "| manifest (cold / warm) | AS2 manifest | BM25 rebuild | BM25 query |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        root = Path(tempfile.mkdtemp(prefix=f"agm-bench-{n}-"))
        try:
            make_corpus(root, n)
            repeat = args.repeat if n < 10_000 else max(3, args.repeat // 3)
            ours = asyncio.run(bench_mnemoscope(root, repeat))
            theirs: dict[str, float] | str = "skipped"
            if not args.skip_agentscope:
                theirs = bench_agentscope(args.as2_python, root, repeat)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        results["latency"][n] = {"mnemoscope": ours, "agentscope": theirs}
        if isinstance(theirs, dict):
            as_prompt = f"{theirs['prompt_ms']:.2f} / {theirs['prompt_first_ms']:.2f}"
            as_manifest = f"{theirs['manifest_ms']:.2f}"
        else:
            as_prompt = as_manifest = "n/a"
        print(
            f"| {n:,} | {ours['prompt_warm_ms']:.3f} ({ours['prompt_warm_cpu_ms']:.3f}) "
            f"| {ours['prompt_cold_ms']:.2f} ({ours['prompt_cold_cpu_ms']:.2f}) "
            f"| {ours['full_check_ms']:.2f} | {as_prompt} "
            f"| {ours['manifest_cold_ms']:.2f} / {ours['manifest_warm_ms']:.2f} | {as_manifest} "
            f"| {ours['ranker_build_ms']:.2f} | {ours['ranker_query_ms']:.3f} |"
        )
        if ours["warm_full_scans"]:
            print(f"\n(warning: {ours['warm_full_scans']:.0f} full scans in the warm replies)\n")
        if isinstance(theirs, str) and theirs != "skipped":
            print(f"\n{theirs}\n")
    goals = [
        ("warm prompt, 1,000 files", 1_000, "prompt_warm_ms", None, "prompt_ms"),
        ("warm prompt, 10,000 files", 10_000, "prompt_warm_ms", 0.3, "prompt_ms"),
        ("cold prompt, 1,000 files", 1_000, "prompt_cold_ms", 5.0, "prompt_first_ms"),
    ]
    rows = [g for g in goals if g[1] in results["latency"]]
    if rows:
        print("\n## Prompt goals (issue 12, item 4)\n")
        print("| case | mnemoscope ms (cpu) | goal ms | AS2 reads MEMORY.md, ms | met |")
        print("|---|---:|---:|---:|---|")
        for label, n, key, goal, as_key in rows:
            lat = results["latency"][n]
            ours_ms = lat["mnemoscope"][key]
            theirs_ms = (
                f"{lat['agentscope'][as_key]:.2f}" if isinstance(lat["agentscope"], dict) else "n/a"
            )
            met = "-" if goal is None else ("yes" if ours_ms <= goal else "NO")
            goal_s = "-" if goal is None else f"{goal:g}"
            cpu = lat["mnemoscope"][key.replace("_ms", "_cpu_ms")]
            print(f"| {label} | {ours_ms:.3f} ({cpu:.3f}) | {goal_s} | {theirs_ms} | {met} |")
    print(f"\nload average at end: {_loadavg()}")
    if Path(args.locomo).exists():
        rec = bench_recall(args.locomo)
        results["recall"] = rec
        files = rec["files_per_conversation"]
        print(
            f"\n## Local ranker recall on LoCoMo ({len(files)} conversations, "
            f"{min(files)}-{max(files)} memory files each)\n"
        )
        print(
            "| category | questions | BM25 R@1 | R@5 | R@10 | R@20 "
            "| newest-first R@5 | R@20 | manifest R@100 |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for cat, m in rec["per_category"].items():
            print(
                f"| {cat} | {m['n']} | {m['bm25@1']:.3f} | {m['bm25@5']:.3f} "
                f"| {m['bm25@10']:.3f} | {m['bm25@20']:.3f} "
                f"| {m['newest@5']:.3f} | {m['newest@20']:.3f} | {m['manifest@100']:.3f} |"
            )
    else:
        print(
            f"\n(LoCoMo data not found at {args.locomo}; pass --locomo PATH for the recall table)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
