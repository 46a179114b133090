"""The permission engine: one :class:`PermissionContext` decides every tool call."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from mnemoscope.permission._types import (
    AdditionalWorkingDirectory,
    AskCallback,
    PermissionDecision,
    PermissionMode,
    PermissionRule,
)


def resolve_path(path: str, cwd: str) -> Path:
    """Resolve ``~``, relative parts and symlinks; raises ValueError on NUL bytes."""
    if "\x00" in path:
        raise ValueError("path contains a NUL byte")
    p = Path(os.path.expanduser(path))
    if not p.is_absolute():
        p = Path(cwd) / p
    return p.resolve(strict=False)


def is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class PermissionContext(BaseModel):
    """Per-agent permission state, at ``agent.state.permission_context``.

    Attributes:
        mode: see :class:`PermissionMode`.
        cwd: the agent's own working directory (default: the process's current one).
        working_directories: additional directories, keyed by path.
        allow_rules / deny_rules: explicit rules; deny wins over allow.
        ask_callback: async approval callback; without one an ask is a deny.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    mode: PermissionMode = PermissionMode.DEFAULT
    cwd: str = Field(default_factory=os.getcwd)
    working_directories: dict[str, AdditionalWorkingDirectory] = Field(default_factory=dict)
    allow_rules: list[PermissionRule] = Field(default_factory=list)
    deny_rules: list[PermissionRule] = Field(default_factory=list)
    ask_callback: AskCallback | None = None

    def roots(self) -> list[Path]:
        """Every working directory, resolved."""
        out = [resolve_path(self.cwd, self.cwd)]
        out += [resolve_path(d.path, self.cwd) for d in self.working_directories.values()]
        return out

    def decide(
        self,
        tool_name: str,
        *,
        is_read_only: bool,
        auto_allow: bool = False,
        paths: list[tuple[str, str]] | None = None,
    ) -> PermissionDecision:
        """Decide one call. ``paths`` is a list of ``(path, "read"|"write")``."""
        paths = paths or []
        resolved: list[tuple[str, Path, str]] = []
        for raw, access in paths:
            try:
                resolved.append((raw, resolve_path(raw, self.cwd), access))
            except (ValueError, OSError) as exc:
                return PermissionDecision(
                    behavior="deny", message=f"{tool_name}: invalid path {raw!r}: {exc}", reason="path"
                )
        for rule in self.deny_rules:
            if _rule_matches(rule, tool_name, resolved):
                return PermissionDecision(
                    behavior="deny", message=f"{tool_name} is denied by a rule ({rule.tool} {rule.path or ''}).", reason="rule"
                )
        if self.mode == PermissionMode.BYPASS:
            return PermissionDecision(behavior="allow", reason="mode")
        for rule in self.allow_rules:
            if _rule_matches(rule, tool_name, resolved):
                return PermissionDecision(behavior=rule.behavior, reason="rule")
        if auto_allow:
            return PermissionDecision(behavior="allow", reason="tool")
        roots = self.roots()
        writes = [r for r in resolved if r[2] == "write"]
        for raw, p, access in resolved:
            if not any(is_within(p, root) for root in roots):
                return PermissionDecision(
                    behavior="deny",
                    message=(
                        f"{tool_name}: {access} access to {raw!r} is outside the working "
                        "directories; ask the user to add the directory."
                    ),
                    reason="outside_working_dirs",
                )
        if writes or (not is_read_only and paths):
            if self.mode == PermissionMode.PLAN:
                return PermissionDecision(
                    behavior="deny", message=f"{tool_name}: writes are disabled in plan (read-only) mode.", reason="mode"
                )
            if self.mode == PermissionMode.DEFAULT:
                return PermissionDecision(
                    behavior="ask",
                    message=f"{tool_name} wants to write {', '.join(r[0] for r in writes)}.",
                    reason="mode",
                )
        return PermissionDecision(behavior="allow", reason="mode")


def _rule_matches(rule: PermissionRule, tool_name: str, resolved: list[tuple[str, Path, str]]) -> bool:
    if rule.tool not in ("*", tool_name):
        return False
    if rule.path is None:
        return True
    pattern = os.path.expanduser(rule.path)
    return any(fnmatch.fnmatch(str(p), pattern) for _, p, _ in resolved)
