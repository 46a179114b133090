"""The root package: the names a user starts with, loaded lazily."""

from __future__ import annotations

import subprocess
import sys

import mnemoscope


def test_every_root_name_resolves_to_its_home() -> None:
    from mnemoscope.agent import Agent
    from mnemoscope.memory import InMemoryMemory
    from mnemoscope.message import Msg

    assert mnemoscope.Agent is Agent
    assert mnemoscope.Msg is Msg
    assert mnemoscope.InMemoryMemory is InMemoryMemory
    for name in mnemoscope.__all__:
        assert getattr(mnemoscope, name) is not None, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        _ = mnemoscope.NoSuchThing  # type: ignore[attr-defined]
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("mnemoscope.NoSuchThing did not raise")


def test_import_mnemoscope_loads_no_layer_and_no_extra() -> None:
    code = (
        "import sys, mnemoscope\n"
        "heavy = [m for m in sys.modules if m.startswith(('mnemoscope.agent', 'redis', "
        "'sqlalchemy', 'mem0', 'onnxruntime'))]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_quick_start_names_import_from_the_root() -> None:
    from mnemoscope import Agent, AgenticMemoryMiddleware, Read, Toolkit, UserMsg  # noqa: F401
