"""Lazy package exports: one helper (``mnemoscope._lazy``), and type checkers see every name.

A lazy name is looked up at run time through the table given to ``lazy_exports``, while
type checkers read the ``if TYPE_CHECKING:`` imports; the two must name the same things
from the same modules, or a user's IDE sees ``Any`` (or nothing) where a class is.
"""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

import pytest

from mnemoscope._lazy import lazy_exports

SRC = Path(__file__).resolve().parents[2] / "src" / "mnemoscope"
INITS = sorted(SRC.rglob("__init__.py"))


def _module(path: Path) -> str:
    return ".".join(path.relative_to(SRC.parent).parent.parts)


def _type_checking_imports(tree: ast.Module) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for sub in node.body:
                if isinstance(sub, ast.ImportFrom) and sub.module:
                    found.update({a.asname or a.name: sub.module for a in sub.names})
    return found


def _lazy_table(tree: ast.Module) -> dict[str, str] | None:
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) == "lazy_exports"
        ):
            table = ast.literal_eval(node.value.args[1])
            assert isinstance(table, dict)
            return table
    return None


def _bound_eagerly(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_no_package_hand_writes_its_own_module_getattr() -> None:
    hand_written = [
        str(p.relative_to(SRC))
        for p in INITS
        if any(
            isinstance(n, ast.FunctionDef) and n.name in ("__getattr__", "__dir__")
            for n in ast.parse(p.read_text()).body
        )
    ]
    assert not hand_written, f"use mnemoscope._lazy.lazy_exports in {hand_written}"


@pytest.mark.parametrize("path", INITS, ids=lambda p: _module(p))
def test_lazy_names_are_mirrored_for_type_checkers(path: Path) -> None:
    tree = ast.parse(path.read_text())
    table = _lazy_table(tree)
    if table is None:
        return
    assert _type_checking_imports(tree) == table, (
        f"{_module(path)}: the TYPE_CHECKING imports and the lazy_exports table differ"
    )


@pytest.mark.parametrize("path", INITS, ids=lambda p: _module(p))
def test_every_public_name_is_bound_or_lazy(path: Path) -> None:
    tree = ast.parse(path.read_text())
    public: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__":
            public = ast.literal_eval(node.value)
    unbound = set(public) - _bound_eagerly(tree) - set(_lazy_table(tree) or {})
    assert not unbound, f"{_module(path)}.__all__ names what it never binds: {sorted(unbound)}"


def test_a_lazy_name_loads_on_first_use() -> None:
    package = types.ModuleType("fake_package")
    sys.modules["fake_package"] = package
    try:
        getattr_, dir_ = lazy_exports("fake_package", {"JSONDecoder": "json"})
        package.__getattr__ = getattr_  # type: ignore[method-assign]
        assert "JSONDecoder" in dir_()
        import json

        assert package.JSONDecoder is json.JSONDecoder
        assert "JSONDecoder" not in vars(package)  # looked up in its home each time
        with pytest.raises(AttributeError, match="'fake_package' has no attribute 'Nope'"):
            _ = package.Nope
    finally:
        del sys.modules["fake_package"]
