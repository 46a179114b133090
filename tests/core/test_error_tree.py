"""``mnemoscope.errors`` holds every public exception, and its drawn tree is the real one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import mnemoscope.errors as errors

SRC = Path(__file__).resolve().parents[2] / "src" / "mnemoscope"

# Exception classes that stay in their module on purpose (errors.py says why).
KEPT_OUT = {
    "workspace/_fsops.py": {"FsError"},  # the file operations' wire format, also run in sandboxes
    "service/_service.py": {"SessionNotFoundError", "SessionBusyError", "ShuttingDownError"},
    "inspector/_app.py": {"NotFoundError"},  # answered 404 by the page that raises it
}


def _exception_classes() -> dict[str, set[str]]:
    """Every class in src whose bases name an exception, by file."""
    found: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                re.search(r"(Error|Exception)$", ast.unparse(b)) for b in node.bases
            ):
                found.setdefault(str(path.relative_to(SRC)), set()).add(node.name)
    return found


def test_every_public_exception_is_defined_in_errors() -> None:
    stray = {
        file: sorted(n for n in names if not n.startswith("_") and n not in KEPT_OUT.get(file, ()))
        for file, names in _exception_classes().items()
        if file != "errors.py"
    }
    stray = {file: names for file, names in stray.items() if names}
    assert not stray, f"define these in mnemoscope/errors.py and re-export them: {stray}"
    assert set(errors.__all__) == _exception_classes()["errors.py"]


def test_the_drawn_tree_matches_the_classes() -> None:
    doc = errors.__doc__ or ""
    drawn: dict[str, str] = {}  # name -> parent in the drawing
    stack: list[tuple[int, str]] = []
    for line in doc.split("The tree::", 1)[1].split("\n\n")[1].splitlines():
        match = re.match(r"^(\s*(?:[│ ]   )*(?:[├└]── )?)(\w+)", line)
        assert match, line
        depth = len(match.group(1))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            drawn[match.group(2)] = stack[-1][1]
        stack.append((depth, match.group(2)))
    assert set(drawn) | {"MnemoscopeError"} == set(errors.__all__)
    for name, parent in drawn.items():
        cls = getattr(errors, name)
        assert cls.__bases__[0] is getattr(errors, parent), f"{name} is drawn under {parent}"


def test_old_import_paths_still_work() -> None:
    from mnemoscope.context import PinBudgetError
    from mnemoscope.service import ServiceStoreError
    from mnemoscope.workspace import PathDeniedError, WorkspaceError

    assert PinBudgetError is errors.PinBudgetError
    assert ServiceStoreError is errors.ServiceStoreError
    assert WorkspaceError is errors.WorkspaceError
    assert issubclass(PathDeniedError, errors.PermissionDeniedError)
