"""Hide secrets carried by URLs wherever a URL is shown (reprs, error messages, logs).

Example::

    from mnemoscope._redact import redact_url

    redact_url("https://bob:hunter2@proxy.example/v1?api_key=sk-1&region=eu")
    # 'https://bob:***@proxy.example/v1?api_key=***&region=eu'

Two kinds of secret are masked:

* the *userinfo* of a URL: ``user:password@`` keeps the user name and masks the password;
  a lone ``token@`` (how Git hosts and many proxies take a token) is masked whole;
* the value of every query parameter whose name looks secret: it contains ``key``,
  ``token``, ``secret``, ``passw``, ``pwd``, ``sig`` (``sig``, ``signature``,
  ``X-Amz-Signature``), ``auth``, ``credential`` or ``session``. Masking too much in a
  message is harmless; masking too little is a leak, so the match is deliberately wide.

:func:`redact_text` applies both to any text (an SDK error message quotes the URL it
failed on, or a server echoes the request path); :func:`redact_url` is the same for one
URL and passes ``None`` through; :func:`scrub_exception` rewrites the messages of an
exception and of its causes in place, so a logged traceback shows no secret either.

Only what is *shown* is redacted: the real URL still goes to the HTTP client.
"""

from __future__ import annotations

import re

MASK = "***"
"""What a secret is replaced with."""

SECRET_QUERY_WORDS = (
    "key",
    "token",
    "secret",
    "passw",
    "pwd",
    "sig",
    "auth",
    "credential",
    "session",
)
"""A query parameter whose name contains one of these (any case) has its value masked."""

# scheme://userinfo@ : the userinfo runs to the *last* "@" of the authority, so a raw "@"
# inside a password ("user:p@ss@host") is masked too.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/\s?#'\"<>]*)@")
_NAME = r"[A-Za-z0-9_.\-\[\]%]*"
_SECRET_PARAM = re.compile(
    rf"(?P<head>[?&;]{_NAME}(?:{'|'.join(SECRET_QUERY_WORDS)}){_NAME}=)"
    r"(?P<value>[^&;#\s'\"<>]+)",
    re.IGNORECASE,
)


def _mask_userinfo(match: re.Match[str]) -> str:
    userinfo = match["userinfo"]
    if not userinfo:
        return match[0]
    user, sep, _password = userinfo.partition(":")
    masked = f"{user}:{MASK}" if sep and user else MASK
    return f"{match['scheme']}{masked}@"


def redact_text(text: str) -> str:
    """``text`` with URL passwords, token user names and secret query values masked."""
    if "@" in text:
        text = _USERINFO.sub(_mask_userinfo, text)
    if "=" in text:
        text = _SECRET_PARAM.sub(lambda m: m["head"] + MASK, text)
    return text


def redact_url(url: str | None) -> str | None:
    """``url`` safe to show: see :func:`redact_text`; ``None`` stays ``None``."""
    return None if url is None else redact_text(str(url))


def scrub_exception(exc: BaseException, *, depth: int = 8) -> BaseException:
    """Redact the string arguments (and ``message``) of ``exc`` and its causes, in place.

    SDK exceptions chained below ours (``raise ... from exc``) are printed in every
    traceback; their messages may quote the URL that failed. Returns ``exc``.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and depth > 0 and id(current) not in seen:
        seen.add(id(current))
        depth -= 1
        try:
            if any(isinstance(a, str) for a in current.args):
                current.args = tuple(
                    redact_text(a) if isinstance(a, str) else a for a in current.args
                )
            message = getattr(current, "message", None)
            if isinstance(message, str):
                current.message = redact_text(message)  # type: ignore[attr-defined]
        except (AttributeError, TypeError):  # a read-only exception type: leave it
            pass
        current = current.__cause__ or current.__context__
    return exc
