"""Every public resource answers to both ``aclose()`` and ``close()`` (STYLE: async first).

Left with one spelling on purpose: a workspace backend (closed by its workspace), a service
store and an inspector reader (closed by their app), ``Toolkit.close()`` (synchronous).
"""

from __future__ import annotations

import asyncio
import inspect
import os

import pytest

from mnemoscope.embedding import EmbeddingModelBase
from mnemoscope.memory import InMemoryMemory, LongTermMemoryBase, MemoryBase
from mnemoscope.model import ChatModelBase
from mnemoscope.testing import HashEmbeddingModel, ScriptedChatModel
from mnemoscope.workspace import LocalWorkspace, WorkspaceBase

# the bases users hold: each provider, store and workspace inherits both spellings
RESOURCES = [
    ChatModelBase,
    EmbeddingModelBase,
    MemoryBase,
    LongTermMemoryBase,
    WorkspaceBase,
]


@pytest.mark.parametrize("cls", RESOURCES, ids=lambda c: c.__name__)
def test_both_spellings_are_coroutines(cls: type) -> None:
    assert inspect.iscoroutinefunction(cls.aclose), cls
    assert inspect.iscoroutinefunction(cls.close), cls


@pytest.mark.parametrize(
    "make", [ScriptedChatModel, lambda: HashEmbeddingModel(dimensions=8), InMemoryMemory]
)
async def test_close_runs_the_subclass_aclose(make, monkeypatch: pytest.MonkeyPatch) -> None:
    resource = make()
    calls: list[str] = []

    async def aclose() -> None:
        calls.append("aclose")

    monkeypatch.setattr(resource, "aclose", aclose)
    await resource.close()
    assert calls == ["aclose"]


async def test_a_workspace_closes_by_either_name() -> None:
    ws = LocalWorkspace()
    await ws.initialize()
    workdir = ws.workdir
    await ws.aclose()  # the temporary directory it made is gone, as after close()
    assert not await asyncio.to_thread(os.path.exists, workdir)
