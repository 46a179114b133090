"""Who is calling: bearer tokens mapped to user ids.

``auth=`` of :func:`~mnemoscope.service.create_app` is either

* a function ``token -> user id | None`` (sync or async): plug in your identity provider
  (verify a JWT, look a key up in your database); ``None`` means "not a valid token";
* a path to a token file (:class:`TokenFile`), for the simple case;
* a ``{token: user_id}`` mapping.

The user id found here is the only one the service uses: every store key and row, and
the ``user_id`` given to the agent factory, come from it, never from the request body or
from the model.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from mnemoscope.errors import UserError

Authenticator = Callable[[str], "str | Awaitable[str | None] | None"]

USER_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.@+-]{1,128}$")
"""What a user id may look like (an authenticator returning anything else is a bug)."""


def _digest(token: str) -> bytes:
    # looked up by digest: a dict lookup on the token itself would leak timing about it
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class StaticTokens:
    """A fixed ``{token: user_id}`` table (tokens kept only as SHA-256 digests)."""

    def __init__(self, tokens: Mapping[str, str], *, source: str = "tokens") -> None:
        if not tokens:
            raise UserError(f"{source}: no tokens; add at least one 'token user_id' entry")
        self._users: dict[bytes, str] = {}
        for token, user in tokens.items():
            if not isinstance(token, str) or len(token) < 8:
                raise UserError(f"{source}: a token must be a string of 8 characters or more")
            check_user_id(user, source)
            self._users[_digest(token)] = user

    def __call__(self, token: str) -> str | None:
        return self._users.get(_digest(token))

    def __len__(self) -> int:
        return len(self._users)


class TokenFile(StaticTokens):
    """Tokens read from a file: a JSON object ``{"token": "user_id"}``, or lines
    ``token user_id`` (blank lines and ``#`` comments ignored).

    Raises:
        UserError: the file is missing, malformed, or a token or user id is invalid
            (the message names the line).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UserError(f"token file {str(self.path)!r} cannot be read: {exc}") from exc
        super().__init__(parse_tokens(text, str(self.path)), source=f"token file {self.path}")


def parse_tokens(text: str, source: str) -> dict[str, str]:
    """``{token: user}`` from the text of a token file (see :class:`TokenFile`)."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"token file {source}: invalid JSON: {exc}") from exc
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            raise UserError(f'token file {source}: expected {{"token": "user_id", ...}}')
        return dict(data)
    tokens: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise UserError(f"token file {source}, line {n}: expected 'token user_id'")
        if parts[0] in tokens:
            raise UserError(f"token file {source}, line {n}: the token is listed twice")
        tokens[parts[0]] = parts[1]
    return tokens


def check_user_id(user: object, source: str) -> str:
    if not isinstance(user, str) or not USER_ID_PATTERN.match(user):
        raise UserError(
            f"{source}: user id {user!r} must be 1-128 characters of letters, digits, "
            "'_', '.', '@', '+' or '-'"
        )
    return user


def make_authenticator(auth: object) -> Callable[[str], Awaitable[str | None]]:
    """An async ``token -> user id | None`` from what ``create_app(auth=...)`` accepts."""
    if auth is None:
        raise UserError(
            "create_app: auth= is required: a function token -> user id, a token file "
            "path, or a {token: user_id} dict"
        )
    if isinstance(auth, str | Path):
        fn: Callable[[str], object] = TokenFile(auth)
    elif isinstance(auth, Mapping):
        fn = StaticTokens(auth)
    elif callable(auth):
        fn = auth
    else:
        raise UserError(
            f"create_app: auth= must be a function, a token file path or a dict, got "
            f"{type(auth).__name__}"
        )

    async def authenticate(token: str) -> str | None:
        user = fn(token)
        if inspect.isawaitable(user):
            user = await user
        if user is None:
            return None
        return check_user_id(user, "the auth function")

    return authenticate
