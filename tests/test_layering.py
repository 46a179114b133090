"""The import structure of ``src/mnemoscope``: imports only point down, and never into another
package's private modules.

Every import counts: top-level, function-local and under ``TYPE_CHECKING``. The layers are
documented in ``docs/architecture.md``; this file is their single source of truth.

Run ``python tests/test_layering.py`` to print every violation.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "mnemoscope"

# Bottom to top. Packages on one line share a layer and must not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the foundation: the error tree and small helpers any layer may use
    # (these may import each other)
    ("errors", "_optional", "_redact", "_lazy", "_http", "_version"),
    ("message", "text"),
    ("events",),
    ("credential",),
    ("model", "embedding"),
    ("permission",),
    ("workspace",),
    ("tool",),
    ("memory",),
    ("context",),
    ("middleware",),
    ("agent",),
    ("testing",),
    ("service",),
    ("inspector",),
    ("cli",),
    ("__main__",),
)
LAYER_OF = {name: rank for rank, names in enumerate(LAYERS) for name in names}


@dataclass(frozen=True)
class Violation:
    """One import that breaks the layering."""

    file: str
    line: int
    target: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: imports {self.target}: {self.why}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every ``mnemoscope.*`` module named by an import in ``tree``, with its line."""
    found: list[tuple[int, str]] = []
    package_parts = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            if not prefix.startswith("mnemoscope"):
                continue
            # `from mnemoscope.x import _y` may name a private module: count it as one
            for alias in node.names:
                candidate = f"{prefix}.{alias.name}"
                is_module = (SRC.parent / Path(*candidate.split("."))).with_suffix(".py").exists()
                found.append((node.lineno, candidate if is_module else prefix))
    return [(line, name) for line, name in found if name.split(".")[0] == "mnemoscope"]


def _is_private(name: str) -> bool:
    return any(part.startswith("_") for part in name.split(".")[2:])


def _top(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def violations() -> list[Violation]:
    """Walk ``src/mnemoscope`` and return every import against the layering."""
    found: list[Violation] = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        source_top = _top(module)
        rel = str(path.relative_to(SRC.parent.parent))
        if source_top == "":  # the root package re-exports from every layer, lazily
            continue
        if source_top not in LAYER_OF:
            found.append(Violation(rel, 1, module, f"package {source_top!r} has no layer"))
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, target in _imported(tree, module, path.name == "__init__.py"):
            target_top = _top(target)
            if target_top in ("", source_top):
                if target_top == "":
                    found.append(Violation(rel, line, target, "the root package is for users"))
                continue
            if target_top not in LAYER_OF:
                found.append(Violation(rel, line, target, f"{target_top!r} has no layer"))
                continue
            up = LAYER_OF[target_top] - LAYER_OF[source_top]
            if up > 0:
                found.append(Violation(rel, line, target, "a higher layer"))
            elif up == 0 and LAYER_OF[source_top] > 0:
                found.append(Violation(rel, line, target, "a peer package of the same layer"))
            elif _is_private(target) and LAYER_OF[target_top] > 0:
                found.append(Violation(rel, line, target, "another package's private module"))
    return found


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    missing = sorted((packages | modules) - set(LAYER_OF))
    assert not missing, f"add these to LAYERS in {__file__}: {missing}"


# The structural debt still open (issue 17), as (file, imported module). The list may only
# shrink: a new violation fails, and so does an entry here that no longer occurs.
KNOWN: frozenset[tuple[str, str]] = frozenset()
LONG_FILES: frozenset[str] = frozenset()


def test_imports_point_down_and_stay_public() -> None:
    found = violations()
    new = [v for v in found if (v.file, v.target) not in KNOWN]
    assert not new, "imports against the layering:\n" + "\n".join(map(str, new))
    gone = KNOWN - {(v.file, v.target) for v in found}
    assert not gone, f"fixed, so remove from KNOWN in {__file__}: {sorted(gone)}"


MAX_LINES = 600


def test_no_source_file_is_too_long_to_read_in_one_sitting() -> None:
    lengths = {str(p.relative_to(SRC)): len(p.read_bytes().splitlines()) for p in SRC.rglob("*.py")}
    long = {name: n for name, n in lengths.items() if n > MAX_LINES and name not in LONG_FILES}
    assert not long, f"split these below {MAX_LINES} lines: {long}"
    fixed = {name for name in LONG_FILES if lengths.get(name, 0) <= MAX_LINES}
    assert not fixed, f"short enough now, so remove from LONG_FILES: {sorted(fixed)}"


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The scanner itself: function-local, TYPE_CHECKING and relative imports all count."""
    code = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from mnemoscope.agent import Agent\n"
        "def f():\n    from ..middleware import _base\n"
        "import mnemoscope.cli\n"
    )
    names = [n for _, n in _imported(ast.parse(code), "mnemoscope.tool._x", False)]
    assert "mnemoscope.agent" in names
    assert "mnemoscope.middleware._base" in names
    assert "mnemoscope.cli" in names


if __name__ == "__main__":
    items = violations()
    print("\n".join(map(str, items)))
    print(f"{len(items)} violations", file=sys.stderr)
