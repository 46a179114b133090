"""Who is signed in: bearer tokens mapped to user ids, and the page's sign-in cookie.

Example::

    auth = TokenFileAuth("tokens.txt")     # lines "token user", or a JSON {"token": "user"}
    auth("s3cret")                          # -> "alice", or None for an unknown token

An application passes its own resolver instead (any ``token -> user_id | None``, sync or
async), e.g. the one the service uses for its API. The browser signs in by posting its
token once; the page then keeps it in an ``HttpOnly``, ``SameSite=Strict`` cookie and
resolves it again on every request (so a token removed from the file stops working at
once). Forms carry a CSRF value derived from the token.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mnemoscope.errors import UserError

TokenResolver = Callable[[str], "str | Awaitable[str | None] | None"]
"""``token -> user_id`` (``None``: not a valid token); may be a coroutine function."""

COOKIE_NAME = "mnemoscope_inspector"


def load_token_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a token file: a JSON object ``{"token": "user_id"}`` or lines ``token user_id``
    (blank lines and ``#`` comments ignored).

    Raises:
        UserError: the file is missing, malformed, or gives one token twice.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read the token file {str(p)!r}: {exc.strerror}") from None
    tokens: dict[str, str] = {}
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UserError(f"token file {str(p)!r} is not valid JSON: {exc}") from None
        if not all(isinstance(k, str) and isinstance(v, str) and k and v for k, v in data.items()):
            raise UserError(
                f'token file {str(p)!r}: the JSON must map token strings to user ids: {{"t": "u"}}'
            )
        return dict(data)
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise UserError(
                f"token file {str(p)!r} line {lineno}: expected 'TOKEN USER_ID', got {line!r}"
            )
        token, user = parts
        if token in tokens:
            raise UserError(f"token file {str(p)!r} line {lineno}: this token is listed twice")
        tokens[token] = user
    if not tokens:
        raise UserError(f"token file {str(p)!r} lists no token; add lines 'TOKEN USER_ID'")
    return tokens


class TokenFileAuth:
    """A resolver over a static token table (from a file or a dict).

    Args:
        source: a token file path (see :func:`load_token_file`) or a ``{token: user}`` dict.
    """

    def __init__(self, source: str | os.PathLike[str] | dict[str, str]) -> None:
        self.tokens = dict(source) if isinstance(source, dict) else load_token_file(source)
        for token, user in self.tokens.items():
            if not token or not user:
                raise UserError("TokenFileAuth: every token and user id must be non-empty")

    @property
    def users(self) -> set[str]:
        return set(self.tokens.values())

    def __call__(self, token: str) -> str | None:
        found = None
        given = token.encode()
        for known, user in self.tokens.items():  # compare every entry: constant time
            if hmac.compare_digest(known.encode(), given):
                found = user
        return found


def as_resolver(auth: Any) -> Callable[[str], Awaitable[str | None]]:
    """An async resolver from a callable, a :class:`TokenFileAuth`, a dict or a file path."""
    if isinstance(auth, dict | str | os.PathLike):
        auth = TokenFileAuth(auth)
    if not callable(auth):
        raise UserError(
            "auth must be a token -> user_id callable, a {token: user} dict or a token file path"
        )

    async def resolve(token: str) -> str | None:
        if not token:
            return None
        user = auth(token)
        if inspect.isawaitable(user):
            user = await user
        if user is not None and (not isinstance(user, str) or not user):
            raise UserError(f"the auth function must return a user id string or None, got {user!r}")
        return user

    return resolve


def csrf_value(token: str) -> str:
    """The CSRF value of the forms of a signed-in token (a cross-site page cannot read it)."""
    return hashlib.sha256(b"mnemoscope-inspector-csrf\0" + token.encode()).hexdigest()[:32]


def bearer(header: str | None) -> str:
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip()
    return ""
