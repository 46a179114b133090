"""What every HTTP model adapter shares: the default timeout and one error description.

Each adapter passes its own SDK's exception classes, so an Anthropic connection failure is
described as one (the classifier once tested only OpenAI's classes and called it "an
unusable response").
"""

from __future__ import annotations

from mnemoscope._redact import redact_text, scrub_exception
from mnemoscope.errors import ModelCallError

DEFAULT_TIMEOUT = 120.0
"""Seconds before a model call times out (per HTTP request)."""

_STATUS_HINTS = {
    401: " (check the API key)",
    403: " (check the API key's permissions)",
    404: " (check the model name and base_url)",
    429: " (rate limited; retry later or lower the request rate)",
}


def model_call_error(
    provider: str,
    model: str,
    base_url: str | None,
    exc: Exception,
    *,
    timeout_errors: tuple[type[BaseException], ...] = (),
    connection_errors: tuple[type[BaseException], ...] = (),
) -> ModelCallError:
    """A :class:`ModelCallError` describing an SDK exception (status, provider, model).

    Args:
        provider: the provider's name, for the message.
        model: the model name.
        base_url: the server, when one was configured.
        exc: the SDK's exception.
        timeout_errors: the SDK's timeout classes (checked before ``connection_errors``:
            SDKs derive their timeout from their connection error).
        connection_errors: the SDK's "could not reach the server" classes.

    Secrets in URLs (a password in ``base_url``, ``?api_key=...`` echoed by a server) are
    masked in the message and in the messages of ``exc`` and its causes, which tracebacks
    show (see :mod:`mnemoscope._redact`).
    """
    scrub_exception(exc)
    where = f"{provider} model {model!r}" + (f" at {base_url}" if base_url else "")
    status = getattr(exc, "status_code", None)
    if status is not None:
        body = getattr(exc, "body", None)
        detail = body.get("message") if isinstance(body, dict) else None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            detail = body["error"].get("message") or detail
        detail = detail or getattr(exc, "message", None) or str(exc)
        msg = f"{where} failed with HTTP {status}: {detail}{_STATUS_HINTS.get(status, '')}"
    elif isinstance(exc, (*timeout_errors, TimeoutError)):
        msg = f"{where} timed out: {exc}"
    elif isinstance(exc, (*connection_errors, ConnectionError)):
        msg = f"{where} could not be reached: {exc} (is the server running?)"
    else:
        msg = f"{where} returned an unusable response: {type(exc).__name__}: {exc}"
    error = ModelCallError(redact_text(msg))
    error.status_code = status
    return error
