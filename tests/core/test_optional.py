from __future__ import annotations

import pytest

from mnemoscope._optional import require
from mnemoscope.errors import MissingExtraError


def test_missing_module_names_the_extra() -> None:
    with pytest.raises(MissingExtraError) as info:
        require("definitely_not_installed_module_xyz", extra="redis", feature="RedisMemory")
    message = str(info.value)
    assert "RedisMemory requires the 'redis' extra" in message
    assert "pip install 'mnemoscope[redis]'" in message
    assert isinstance(info.value, ImportError)


def test_present_module_is_returned() -> None:
    assert require("json", extra="x", feature="y").dumps([1]) == "[1]"


def test_mem0_middleware_without_mem0_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from mnemoscope.middleware import Mem0Middleware
    from mnemoscope.testing import HashEmbeddingModel, ScriptedChatModel

    monkeypatch.setitem(sys.modules, "mem0", None)  # makes `import mem0` fail
    with pytest.raises(MissingExtraError, match=r"pip install 'mnemoscope\[mem0\]'"):
        Mem0Middleware(
            user_id="alice",
            chat_model=ScriptedChatModel([]),
            embedding_model=HashEmbeddingModel(dimensions=32),
        )
