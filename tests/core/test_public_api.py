"""Every public name of every package imports, and ``__all__`` is sorted."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = [
    "mnemoscope.agent",
    "mnemoscope.context",
    "mnemoscope.credential",
    "mnemoscope.embedding",
    "mnemoscope.errors",
    "mnemoscope.inspector",
    "mnemoscope.memory",
    "mnemoscope.message",
    "mnemoscope.middleware",
    "mnemoscope.model",
    "mnemoscope.permission",
    "mnemoscope.service",
    "mnemoscope.testing",
    "mnemoscope.tool",
    "mnemoscope.workspace",
]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_imports(package: str) -> None:
    module = importlib.import_module(package)
    names = list(module.__all__)
    assert names == sorted(names, key=lambda n: (not n.isupper(), n)) or names == sorted(names)
    for name in names:
        assert getattr(module, name) is not None, f"{package}.{name}"
