"""A ``Mem0LongTermMemory`` that is never closed is cleaned up by the garbage collector
without deadlocking the thread the collector interrupted.

The collector runs a finalizer wherever it interrupts the program, possibly inside a call
that holds the Qdrant registry's lock. The finalizer used to release the shared client
right there, taking that lock again: the thread waited for itself.
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

pytest.importorskip("mem0", reason="the 'mem0' extra (mem0ai) is not installed")

from mnemoscope.memory._mem0 import _REAPER, QDRANT_CLIENTS, Mem0LongTermMemory
from mnemoscope.testing import HashEmbeddingModel, ScriptedChatModel


def test_a_collected_store_is_released_even_while_the_registry_lock_is_held(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "qdrant")
    store = Mem0LongTermMemory(
        chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(64), path=path
    )
    assert QDRANT_CLIENTS.refs(path) == 1
    box = [store]
    del store

    def collect_inside_the_lock() -> None:
        with QDRANT_CLIENTS._lock:  # as if the collector interrupted acquire()/release()
            box.clear()
            gc.collect()

    collector = threading.Thread(target=collect_inside_the_lock, daemon=True)
    collector.start()
    collector.join(10)
    assert not collector.is_alive(), "the finalizer deadlocked on the Qdrant registry lock"
    assert _REAPER.wait(30)
    assert QDRANT_CLIENTS.refs(path) == 0
    # the directory can be opened again
    again = Mem0LongTermMemory(
        chat_model=ScriptedChatModel([]), embedding_model=HashEmbeddingModel(64), path=path
    )
    again.close_sync()
