"""A static (model2vec) embedder: a token-vector table and a mean, numpy only.

Example::

    from mnemoscope.embedding import StaticEmbeddingModel, build_static_embedder

    build_static_embedder("minilm-static")        # once, ~30 s: `mnemoscope ltm build-embedder`
    embedder = StaticEmbeddingModel("minilm-static")
    vectors = await embedder.embed(["dark-mode charts", "tax forms"])   # 256 floats each

A static embedder maps every token of the tokenizer to a fixed vector, distilled offline from
a sentence encoder (model2vec's method); a text's vector is the L2-normalised mean of its
tokens' vectors. No neural network runs at query time: a query takes a fraction of a
millisecond and indexing goes at many thousand texts a second, for a point or so of recall
(docs/embedders.md has the measured figures). Use it for big imports, tests and small
machines.

The directory is model2vec's format (``config.json``, ``model.safetensors`` with an
``embeddings`` table, ``tokenizer.json``), so ``model2vec.StaticModel.from_pretrained`` loads
it too, and this class loads model2vec models (vocabulary-quantised ones included). Only
numpy and ``tokenizers`` (the ``local`` extra) are needed.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope.embedding._base import EmbeddingModelBase
from mnemoscope.embedding._onnx import l2_normalize, load_tokenizer
from mnemoscope.errors import UserError

STATIC_FILES = ("config.json", "model.safetensors", "tokenizer.json")
"""The files of a static embedder's directory."""

INLINE_TEXTS = 16
"""Batches up to this size are embedded on the event loop's thread: a thread hop costs more."""

_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I64": np.int64}
_DTYPES.update({"I32": np.int32, "U8": np.uint8})
_NAMES = {np.dtype(v).str: k for k, v in _DTYPES.items()}


def read_safetensors(path: Path) -> dict[str, Any]:
    """The tensors of a ``.safetensors`` file as numpy arrays (the format is a JSON header)."""
    data = path.read_bytes()
    if len(data) < 8:
        raise UserError(f"{path} is not a safetensors file (too short)")
    (size,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8 : 8 + size])
    except ValueError as exc:
        raise UserError(f"{path} is not a safetensors file ({exc})") from exc
    base = 8 + size
    out: dict[str, Any] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise UserError(f"{path}: tensor {name!r} has unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        array = np.frombuffer(
            data[base + start : base + end], dtype=np.dtype(dtype).newbyteorder("<")
        )
        out[name] = array.reshape(info["shape"])
    return out


def write_safetensors(path: Path, tensors: Mapping[str, Any]) -> None:
    """Write numpy arrays as a ``.safetensors`` file."""
    header: dict[str, Any] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, array in tensors.items():
        arr = np.ascontiguousarray(array)
        arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        raw = arr.tobytes()
        key = np.dtype(arr.dtype).newbyteorder("<").str
        header[name] = {
            "dtype": _NAMES[key],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the format aligns the data on 8 bytes
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"".join(chunks))


def _missing_files(folder: Path) -> list[str]:
    return [name for name in STATIC_FILES if not (folder / name).is_file()]


class StaticEmbeddingModel(EmbeddingModelBase):
    """A model2vec static embedder loaded from a directory (numpy and ``tokenizers``).

    Args:
        path: the directory ``build_static_embedder`` (``mnemoscope ltm build-embedder``)
            wrote, or any model2vec model directory.
        model: the name stores record; by default the one in ``config.json``
            (``"all-MiniLM-L6-v2-static-256"`` for the built one), else
            ``"model2vec:<directory name>"``.
        dimensions: checked against the table when given; read from it by default.
        batch_size: texts per batch.
        normalize: L2-normalise vectors; by default what the model's config says.
        max_length: tokens kept per text (512, model2vec's default).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        model: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 1024,
        normalize: bool | None = None,
        max_length: int | None = 512,
    ) -> None:
        folder = Path(path)
        if not folder.is_dir():
            raise UserError(
                f"StaticEmbeddingModel: no directory at {str(folder)!r}; build one with "
                f"`mnemoscope ltm build-embedder {folder}`"
            )
        missing = _missing_files(folder)
        if missing:
            raise UserError(
                f"StaticEmbeddingModel: {str(folder)!r} is not a static embedder (missing "
                f"{', '.join(missing)}); build one with `mnemoscope ltm build-embedder DIR`"
            )
        if batch_size < 1:
            raise UserError(f"batch_size must be >= 1, got {batch_size}")
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except ValueError as exc:
            raise UserError(f"{folder / 'config.json'} is not valid JSON: {exc}") from exc
        tensors = read_safetensors(folder / "model.safetensors")
        table = tensors.get("embeddings", tensors.get("embedding.weight"))
        if table is None:
            raise UserError(f"{folder / 'model.safetensors'} holds no 'embeddings' table")
        actual = int(table.shape[1])
        if dimensions is not None and dimensions != actual:
            raise UserError(
                f"StaticEmbeddingModel({str(folder)!r}) produces {actual}-dimensional vectors "
                f"but dimensions={dimensions}; pass dimensions={actual} or leave it out"
            )
        name = model or config.get("mnemoscope_model") or f"model2vec:{folder.resolve().name}"
        super().__init__(str(name), dimensions=actual, batch_size=batch_size)
        self.path = folder
        self.normalize = bool(config.get("normalize", True) if normalize is None else normalize)
        self.max_length = max_length
        # int8 tables (model2vec's quantize_to="int8") are scaled per model, not per row:
        # float32 keeps the mean exact
        self._table = table.astype(np.float32)
        weights = tensors.get("weights")
        mapping = tensors.get("mapping")
        if weights is not None:
            self._weights: Any = weights.astype(np.float32)
        else:
            self._weights = None
        self._mapping = mapping.astype(np.int64) if mapping is not None else None
        self._tokenizer = load_tokenizer(
            folder / "tokenizer.json", max_length=max_length, pad=False
        )
        unk = getattr(self._tokenizer.model, "unk_token", None)
        self._unk: int | None = self._tokenizer.token_to_id(unk) if unk else None
        # encode_batch_fast (tokenizers >= 0.20) skips the character offsets we do not use
        self._encode_batch = getattr(
            self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch
        )

    def _encode(self, texts: list[str]) -> list[list[float]]:
        encodings = self._encode_batch(texts, add_special_tokens=False)
        ids_per_text = [e.ids for e in encodings]
        if self._unk is not None:  # model2vec drops unknown tokens, their vector is noise
            ids_per_text = [[i for i in ids if i != self._unk] for ids in ids_per_text]
        lengths = np.array([len(ids) for ids in ids_per_text], dtype=np.int64)
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        if lengths.sum() > 0:
            flat = np.fromiter((i for ids in ids_per_text for i in ids), dtype=np.int64)
            rows = self._table[self._mapping[flat] if self._mapping is not None else flat]
            if self._weights is not None:
                rows = rows * self._weights[flat][:, None]
            nonempty = lengths > 0
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))[nonempty]
            out[nonempty] = np.add.reduceat(rows, starts, axis=0) / lengths[nonempty, None]
        if self.normalize:
            out = l2_normalize(out)
        result: list[list[float]] = out.tolist()
        return result

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        if len(texts) <= INLINE_TEXTS:
            return self._encode(texts)
        return await asyncio.to_thread(self._encode, texts)
