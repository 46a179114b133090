"""The inspector's view of the native store is scoped by user, as mem0's calls are: a
memory of another user is "not found" in every call (real SQLite, no page involved)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the 'inspector' extra (starlette) is not installed")

from mnemoscope.inspector._ltm_views import long_term_view
from mnemoscope.memory import LocalLongTermMemory


async def test_the_native_view_finds_only_the_users_own_memories(tmp_path: Path) -> None:
    store = LocalLongTermMemory(tmp_path / "ltm.db")
    view = long_term_view(store)
    try:
        tea = (await store.record("Alice prefers green tea.", user_id="alice")).added[0].id
        assert await view.get(tea, user_id="bob") is None
        assert await view.history(tea, user_id="bob", include_deleted=True) == []
        with pytest.raises(KeyError):
            await view.update(tea, "hacked", user_id="bob")
        assert await view.delete(tea, user_id="bob") is False
        item = await view.get(tea, user_id="alice")
        assert item is not None and item.content == "Alice prefers green tea."

        assert await view.delete(tea, user_id="alice") is True
        # the native history says whose a deleted memory was: only its owner sees it
        assert [h.event for h in await view.history(tea, user_id="alice")] == ["add", "delete"]
        assert await view.history(tea, user_id="bob", include_deleted=True) == []
    finally:
        await view.aclose()
