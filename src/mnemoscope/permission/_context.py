"""The permission engine: one :class:`PermissionContext` decides every tool call.

Order of a decision (first match wins):

1. every path is validated and resolved (``~``, relative, ``..``, symlinks); a NUL byte,
   a control or bidi character, a look-alike of ``/`` or ``..``, or an over-long path
   is denied;
2. deny rules (matched case- and Unicode-insensitively, on the resolved and the lexical
   path) deny, in every mode;
3. well-known secret locations (:data:`SECRET_LOCATIONS`: ``~/.ssh``, ``/etc/shadow``,
   ``/proc/*/environ``...) are denied in every mode, unless an allow rule names them;
4. ``BYPASS`` allows;
5. a tool with ``auto_allow`` allows itself (it confines itself, e.g. memory tools);
6. device files, FIFOs and sockets are denied;
7. a path outside the working directories is denied -- reads too -- unless an allow
   rule with a ``path`` pattern grants it;
8. ``PLAN`` denies every tool that is not read-only;
9. allow / ask rules apply;
10. ``DEFAULT`` asks for writes inside the working directories;
11. otherwise allow.

The working directories are ``cwd`` and ``working_directories``, except that a ``cwd``
which is ``/``, the home directory or a parent of it is not one implicitly (add it to
``working_directories`` to work there). A relative rule pattern (``secrets/**``) means
below ``cwd`` and below each working directory; a deny pattern starting with ``*``
(``**/.env``) also matches anywhere.

The engine decides before the tool runs; file tools then pass
:meth:`PermissionContext.call_roots` -- the working directories plus exactly what an
allow rule grants to this call -- to their backend, which re-checks the real location
of every file it opens, so a symlink swapped in between cannot lead outside.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import unicodedata
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from mnemoscope.permission._secrets import SECRET_LOCATIONS, names_location, secret_location
from mnemoscope.permission._types import (
    AdditionalWorkingDirectory,
    AskCallback,
    PermissionDecision,
    PermissionMode,
    PermissionRule,
)

MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F)}
# characters that look like "/" or "." (beyond what NFKC folds)
_LOOKALIKES = str.maketrans(
    {c: "/" for c in "\u2215\u2044\u29f8\u2571\uff0f\u29c4"}
    | {c: "." for c in "\u2024\ufe52\uff0e\u3002\u0701\u0702\ua4f8\u2e31\u30fb"}
)


def _check_component(part: str) -> None:
    if len(os.fsencode(part)) > MAX_NAME_BYTES:
        raise ValueError(f"a path component is longer than {MAX_NAME_BYTES} bytes")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F or ch in _BIDI for ch in part):
        raise ValueError("the path contains a control or bidirectional-override character")
    folded = unicodedata.normalize("NFKC", part).translate(_LOOKALIKES)
    if folded != part and (folded in (".", "..") or "/" in folded or "\\" in folded):
        raise ValueError(
            f"the path component {part!r} imitates {folded!r} with look-alike characters"
        )


def resolve_path(path: str | os.PathLike[str], cwd: str) -> Path:
    """Resolve ``~``, relative parts, ``..`` and symlinks into a real absolute path.

    Raises:
        ValueError: NUL byte, control/bidi characters, look-alikes of ``/`` or ``..``,
            a path over 4096 bytes or a component over 255 bytes.
    """
    raw = os.fspath(path)
    if not isinstance(raw, str) or not raw:
        raise ValueError("the path is empty")
    if "\x00" in raw:
        raise ValueError("the path contains a NUL byte")
    if len(os.fsencode(raw)) > MAX_PATH_BYTES:
        raise ValueError(f"the path is longer than {MAX_PATH_BYTES} bytes")
    for part in raw.split("/"):
        _check_component(part)
    expanded = os.path.expanduser(raw) if raw.startswith("~") else raw
    if not os.path.isabs(expanded):
        expanded = os.path.join(cwd, expanded)
    return Path(os.path.realpath(expanded))


def _lexical(path: str, cwd: str) -> str:
    expanded = os.path.expanduser(path) if path.startswith("~") else path
    return os.path.normpath(os.path.join(cwd, expanded))


def is_within(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or below it (both resolved).

    Besides the string comparison, the identities (device, inode) of ``path``'s existing
    ancestors are compared with ``root``'s, so the same directory reached through another
    spelling (case-insensitive or Unicode-normalising file systems, bind mounts) counts.
    """
    if path == root or root in path.parents:
        return True
    try:
        rs = os.stat(root)
    except OSError:
        return False
    for candidate in (path, *path.parents):
        try:
            cs = os.stat(candidate)
        except OSError:
            continue
        if (cs.st_dev, cs.st_ino) == (rs.st_dev, rs.st_ino):
            return True
    return False


def _fold(s: str) -> str:
    return unicodedata.normalize("NFC", s).casefold()


_Resolved = tuple[str, Path, str, str]  # raw, resolved, lexical, access


def _home() -> Path:
    return Path(os.path.realpath(os.path.expanduser("~")))


def _too_broad(path: Path) -> str:
    """Why ``path`` cannot be an implicit working directory ('' when it can)."""
    home = _home()
    if path == Path("/"):
        return "the file system root"
    if path == home:
        return "the home directory"
    if path in home.parents:
        return "a parent of the home directory"
    return ""


class PermissionContext(BaseModel):
    """Per-agent permission state, at ``agent.state.permission_context``.

    Attributes:
        mode: see :class:`PermissionMode`.
        cwd: the agent's own working directory (default: the process's current one);
            relative paths resolve against it. It is a working directory itself unless
            it is ``/``, the home directory or a parent of it.
        working_directories: additional directories, keyed by path (a middleware grants
            the directory it owns by adding an entry). Explicit entries are used as they
            are, ``/`` or the home directory included.
        allow_rules: rules that allow (or ask for) calls; a rule with a ``path`` pattern
            also grants access to matching paths outside the working directories.
        deny_rules: rules that deny, in every mode; deny wins over allow.
        secret_locations: refused in every mode unless an allow rule names them
            (default :data:`SECRET_LOCATIONS`).
        ask_callback: async approval callback; without one an ask is a deny.

    Example::

        ctx = PermissionContext(mode=PermissionMode.ACCEPT_EDITS)
        ctx.working_directories["/srv/notes"] = AdditionalWorkingDirectory(
            path="/srv/notes", source="notes-middleware")
        ctx.decide("Write", is_read_only=False, paths=[("/srv/notes/a.md", "write")])
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    mode: PermissionMode = PermissionMode.DEFAULT
    cwd: str = Field(default_factory=os.getcwd)
    working_directories: dict[str, AdditionalWorkingDirectory] = Field(default_factory=dict)
    allow_rules: list[PermissionRule] = Field(default_factory=list)
    deny_rules: list[PermissionRule] = Field(default_factory=list)
    secret_locations: list[str] = Field(default_factory=lambda: list(SECRET_LOCATIONS))
    ask_callback: AskCallback | None = None

    def roots(self) -> list[Path]:
        """Every working directory (own first), resolved; invalid entries are skipped.

        ``cwd`` is left out when it is ``/``, the home directory or a parent of it.
        """
        out: list[Path] = []
        for i, raw in enumerate((self.cwd, *(d.path for d in self.working_directories.values()))):
            try:
                p = resolve_path(raw, self.cwd)
            except ValueError:
                continue
            if i == 0 and _too_broad(p):
                continue
            if p not in out:
                out.append(p)
        return out

    def is_inside(self, path: str) -> bool:
        """Whether ``path`` resolves inside a working directory."""
        try:
            p = resolve_path(path, self.cwd)
        except ValueError:
            return False
        return any(is_within(p, r) for r in self.roots())

    def call_roots(self, tool_name: str, paths: list[tuple[str, str]]) -> list[Path] | None:
        """The directories a backend must confine this call to (``None``: unconfined).

        The working directories, plus, for each path outside them that an allow rule
        grants (the same grant :meth:`decide` applies), the directory the rule grants:
        the subtree of a ``dir/**`` rule, otherwise the directory holding the path. A
        path that a deny rule or a secret location refuses adds nothing. ``BYPASS``
        returns ``None``.

        Args:
            tool_name: the tool the call is for (rules can be per tool).
            paths: ``(path, "read"|"write")`` pairs, as for :meth:`decide`.
        """
        if self.mode == PermissionMode.BYPASS:
            return None
        roots = self.roots()
        out = list(roots)
        anchors = self._anchors()
        for raw, access in paths:
            try:
                p = resolve_path(raw, self.cwd)
            except (ValueError, OSError, TypeError):
                continue
            if any(is_within(p, r) for r in roots):
                continue
            item: _Resolved = (raw, p, str(p), access)
            if self._refusal(tool_name, [(raw, p, _lexical(raw, self._cwd()), access)]):
                continue
            for rule in self.allow_rules:
                if not rule.path or rule.behavior == "deny":
                    continue
                if not _rule_matches(rule, tool_name, [item], anchors):
                    continue
                root = _grant_root(rule, p, anchors)
                if root is not None and root not in out:
                    out.append(root)
                break
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
        resolved: list[_Resolved] = []
        cwd = self._cwd()
        for raw, access in paths or []:
            try:
                resolved.append((raw, resolve_path(raw, cwd), _lexical(raw, cwd), access))
            except (ValueError, OSError, TypeError) as exc:
                return _deny(f"{tool_name}: refused path {str(raw)[:200]!r}: {exc}.", "path")
        refused = self._refusal(tool_name, resolved)
        if refused is not None:
            return refused
        if self.mode == PermissionMode.BYPASS:
            return PermissionDecision(behavior="allow", reason="mode")
        if auto_allow:
            return PermissionDecision(behavior="allow", reason="tool")
        for raw, p, _, _ in resolved:
            kind = _special_kind(p)
            if kind:
                return _deny(
                    f"{tool_name}: {raw!r} is a {kind}; only regular files and directories "
                    "can be used.",
                    "special_file",
                )
        # resolving the roots touches the file system: only do it for calls with paths
        roots = self.roots() if resolved else []
        anchors = self._anchors() if resolved else []
        granted = [r for r in self.allow_rules if r.path and r.behavior != "deny"]
        for raw, p, _, access in resolved:
            if any(is_within(p, root) for root in roots):
                continue
            if any(
                _rule_matches(rule, tool_name, [(raw, p, str(p), access)], anchors)
                for rule in granted
            ):
                continue
            shown = raw if str(p) == raw else f"{raw} (resolves to {p})"
            return _deny(
                f"{tool_name}: {access} access to {shown} is outside the working directories "
                f"({self._roots_shown(roots)}). Work inside them, or ask the user to "
                "add the directory to permission_context.working_directories.",
                "outside_working_dirs",
            )
        writes = [r for r in resolved if r[3] == "write"]
        if self.mode == PermissionMode.PLAN and (writes or not is_read_only):
            return _deny(
                f"{tool_name} is not allowed in plan (read-only) mode: it may change things.",
                "mode",
            )
        for rule in self.allow_rules:
            if _rule_matches(rule, tool_name, resolved, anchors) and rule.behavior != "deny":
                message = f"{tool_name} needs approval (rule)." if rule.behavior == "ask" else ""
                return PermissionDecision(behavior=rule.behavior, message=message, reason="rule")
        if self.mode == PermissionMode.DEFAULT and (writes or (not is_read_only and resolved)):
            targets = ", ".join(r[0] for r in writes or resolved)
            return PermissionDecision(
                behavior="ask",
                message=(
                    f"{tool_name} wants to change {targets}; in the default permission mode "
                    "this needs the user's approval (no approval was given)."
                ),
                reason="mode",
            )
        return PermissionDecision(behavior="allow", reason="mode")

    # ---------------------------------------------------------------- helpers
    def _cwd(self) -> str:
        return os.path.abspath(os.path.expanduser(self.cwd))

    def _anchors(self) -> list[str]:
        """Directories relative rule patterns are anchored at: cwd and each working
        directory, lexically and resolved."""
        out: list[str] = []
        cwd = self._cwd()
        for raw in (cwd, *(d.path for d in self.working_directories.values())):
            try:
                candidates = [_lexical(raw, cwd), str(resolve_path(raw, cwd))]
            except (ValueError, OSError):
                continue
            for c in candidates:
                if c not in out:
                    out.append(c)
        return out

    def _refusal(self, tool_name: str, resolved: list[_Resolved]) -> PermissionDecision | None:
        """Deny rules and secret locations: the refusals that hold in every mode."""
        if not resolved:
            return None
        anchors = self._anchors()
        for rule in self.deny_rules:
            if _rule_matches(rule, tool_name, resolved, anchors, deny=True):
                where = f" for {rule.path}" if rule.path else ""
                return _deny(f"{tool_name} is denied by a rule ({rule.tool}{where}).", "rule")
        for raw, p, lexical, access in resolved:
            loc = secret_location([str(p), lexical], self.secret_locations)
            if loc is None or self._names(tool_name, (raw, p, lexical, access), loc, anchors):
                continue
            return _deny(
                f"{tool_name}: {raw} is in {loc}, a well-known secret location; it is refused "
                "in every mode. If the user really wants this, they add an allow rule naming "
                f"it, e.g. PermissionRule(tool={tool_name!r}, path={loc.rstrip('*')!r}) "
                "(a broad rule such as '~/**' does not count).",
                "secret",
            )
        return None

    def _names(self, tool_name: str, item: _Resolved, loc: str, anchors: list[str]) -> bool:
        for rule in self.allow_rules:
            if not rule.path or rule.behavior == "deny" or rule.tool not in ("*", tool_name):
                continue
            patterns = _patterns(rule.path, anchors, deny=False)
            if any(names_location(pat, loc) for pat in patterns) and _rule_matches(
                rule, tool_name, [item], anchors
            ):
                return True
        return False

    def _roots_shown(self, roots: list[Path]) -> str:
        shown = ", ".join(str(r) for r in roots) or "none"
        try:
            cwd = resolve_path(self.cwd, self.cwd)
        except ValueError:
            return shown
        why = _too_broad(cwd)
        if why:
            shown += (
                f"; the current directory {cwd} is {why}, which is never a working "
                "directory implicitly"
            )
        return shown


def _deny(message: str, reason: str) -> PermissionDecision:
    return PermissionDecision(behavior="deny", message=message, reason=reason)


def _special_kind(p: Path) -> str:
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return ""
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device file"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return ""


def _patterns(path: str, anchors: list[str], *, deny: bool) -> list[str]:
    """The absolute patterns a rule's ``path`` stands for.

    Absolute (or ``~``) patterns stand for themselves. A relative one is anchored at
    each of ``anchors`` (``**/x`` also as ``x`` directly below it); a deny pattern
    starting with ``*`` also keeps matching anywhere, as written.
    """
    pattern = os.path.expanduser(path)
    if pattern.startswith("/"):
        return [pattern]
    out = [pattern] if deny and pattern.startswith("*") else []
    for base in anchors:
        out.append(os.path.join(base, pattern))
        if pattern.startswith("**/"):
            out.append(os.path.join(base, pattern[3:]))
    return out


def _rule_matches(
    rule: PermissionRule,
    tool_name: str,
    resolved: list[_Resolved],
    anchors: list[str],
    *,
    deny: bool = False,
) -> bool:
    if rule.tool not in ("*", tool_name):
        return False
    if rule.path is None:
        return True
    pats: list[str] = []
    for pattern in _patterns(rule.path, anchors, deny=deny):
        pats.append(pattern)
        if pattern.endswith("/**"):
            pats.append(pattern[:-3])  # "dir/**" also matches "dir" itself
    if deny:
        pats = [_fold(p) for p in pats]
    for _, p, lexical, _ in resolved:
        for candidate in (str(p), lexical):
            if deny:
                candidate = _fold(candidate)
            if any(fnmatch.fnmatchcase(candidate, pat) for pat in pats):
                return True
    return False


def _grant_root(rule: PermissionRule, p: Path, anchors: list[str]) -> Path | None:
    """The directory an allow rule grants for the (resolved) path ``p`` it matches."""
    assert rule.path is not None
    for pattern in _patterns(rule.path, anchors, deny=False):
        if pattern.endswith("/**"):
            base = pattern[:-3]
            # fnmatch's "*" crosses "/": the smallest matching ancestor is the subtree
            for a in (*reversed(p.parents), p):
                if fnmatch.fnmatchcase(str(a), base):
                    return a
    if p.is_dir():
        return p
    # the directory holding p; for a write into missing directories, the deepest one
    # that exists (the backend creates the rest below it)
    d = p.parent
    while not d.is_dir() and d != d.parent:
        d = d.parent
    return d
