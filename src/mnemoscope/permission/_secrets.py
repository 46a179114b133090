"""Well-known secret locations, refused in every mode unless an allow rule names them.

A path is secret when it, or one of its parents, matches an entry of
:data:`SECRET_LOCATIONS` component by component (``*`` does not cross ``/``), compared
case- and Unicode-insensitively. An allow rule *names* a secret location when the first
components of its pattern fall inside the location's pattern, without ``**``: the rules
``~/.ssh/known_hosts``, ``~/.ssh/**`` and ``/proc/*/environ`` name one; ``~/**``,
``/**`` and ``~/.*/**`` do not.
"""

from __future__ import annotations

import fnmatch
import os
import unicodedata

_HOME_SECRETS = (
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".pgpass",
    ".docker/config.json",
    ".kube",
    ".password-store",
)

SECRET_LOCATIONS: tuple[str, ...] = (
    *(f"~/{p}" for p in _HOME_SECRETS),
    *(f"/root/{p}" for p in _HOME_SECRETS),
    "/etc/shadow*",
    "/etc/gshadow*",
    "/etc/sudoers*",
    "/etc/ssh/ssh_host_*key",
    "/proc/*/environ",
    "/proc/*/task/*/environ",
    "/run/secrets",
    "/var/run/secrets",
)
"""Refused in every mode (``BYPASS`` included) unless an allow rule names them.

``~`` is the home directory at decision time (``$HOME``). Extend or replace the list per
agent with ``PermissionContext.secret_locations``.
"""


def _fold(s: str) -> str:
    return unicodedata.normalize("NFC", s).casefold()


def _parts(path: str) -> list[str]:
    """``/a/b`` -> ``["/", "a", "b"]`` (normalised, ``~`` expanded)."""
    path = os.path.normpath(os.path.expanduser(path))
    head = ["/"] if path.startswith("/") else []
    return head + [p for p in path.split("/") if p]


def secret_location(candidates: list[str], locations: list[str]) -> str | None:
    """The first location one of ``candidates`` (absolute paths) lies in, or ``None``."""
    for loc in locations:
        pattern = [_fold(p) for p in _parts(loc)]
        for cand in candidates:
            parts = [_fold(p) for p in _parts(cand)]
            if len(parts) >= len(pattern) and all(
                fnmatch.fnmatchcase(c, p) for c, p in zip(parts, pattern, strict=False)
            ):
                return loc
    return None


def names_location(rule_pattern: str, location: str) -> bool:
    """Whether an (absolute) allow-rule pattern names ``location`` explicitly."""
    pattern = [_fold(p) for p in _parts(location)]
    rule = [_fold(p) for p in _parts(rule_pattern)]
    if len(rule) < len(pattern):
        return False
    return all(
        "**" not in r and fnmatch.fnmatchcase(r, p) for r, p in zip(rule, pattern, strict=False)
    )
