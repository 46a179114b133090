"""What every HTTP model adapter shares: the default timeout, one error description, and
the SDK client's ownership (:class:`SDKClientAdapter`).

Each adapter passes its own SDK's exception classes, so an Anthropic connection failure is
described as one (the classifier once tested only OpenAI's classes and called it "an
unusable response").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypedDict

from mnemoscope._redact import redact_text, redact_url, scrub_exception
from mnemoscope.errors import ModelCallError, UserError

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


class ClientOptions(TypedDict, total=False):
    """The keyword options of an SDK adapter's constructor that reach its HTTP client.

    An adapter that puts other parameters first (the DashScope models take the credential
    first) declares ``**options: Unpack[...]`` of these and forwards them unchanged, instead
    of repeating each one.
    """

    base_url: str | None
    timeout: float
    max_retries: int
    client: Any | None


class SDKClientAdapter:
    """What an adapter over a provider SDK's async HTTP client keeps: the client, the
    server it talks to, and whether it built the client (and so closes it).

    Chat models and embedding models over the ``openai`` and ``anthropic`` SDKs mix this in;
    both SDKs name their failures ``APITimeoutError`` and ``APIConnectionError``, which
    :meth:`_error` reads from :attr:`_sdk`.

    Attributes:
        provider: the provider's name, for messages.
        credential_class: the credential type accepted, and built when none is passed.
        base_url: the server (``None``: the SDK's default).
        _repr_fields: the attributes ``repr`` shows, in order (``base_url`` with any
            password masked).
    """

    provider: ClassVar[str]
    credential_class: ClassVar[type[Any]]
    _repr_fields: ClassVar[tuple[str, ...]] = ("model", "base_url")
    model: str
    base_url: str | None
    credential: Any
    _sdk: Any  # the SDK module
    _client: Any
    _owns_client: bool

    def _open_client(
        self,
        *,
        client: Any | None,
        credential: Any | None,
        api_key: str | None,
        base_url: str | None,
        build: Callable[[Any, str | None], Any],
    ) -> None:
        """Use ``client`` as is, or ``build(credential, base_url)`` one from the credential.

        Raises:
            UserError: both ``credential`` and ``api_key``, or a credential of another type
                (a string included).
        """
        name = type(self).__name__
        if credential is not None and api_key is not None:
            raise UserError(f"{name}: pass either credential= or api_key=, not both")
        if credential is not None and not isinstance(credential, self.credential_class):
            wanted = f"credential={self.credential_class.__name__}(api_key=...)"
            raise UserError(
                f"{name} expects {wanted}, got {type(credential).__name__}"
                # a string is a model name or key in the credential's place (the DashScope
                # models take the credential first): say how to write the call
                + (f"; write {name}({wanted}, model=...)" if isinstance(credential, str) else "")
            )
        self._owns_client = client is None
        self.credential = credential
        if client is not None:
            self.base_url = str(client.base_url)
            self._client = client
            return
        if credential is None:
            credential = self.credential = self.credential_class(api_key=api_key, base_url=base_url)
        self.base_url = base_url or credential.base_url
        self._client = build(credential, self.base_url)

    def _error(self, exc: Exception) -> ModelCallError:
        """The :class:`ModelCallError` for an exception of the SDK (or of parsing its reply)."""
        return model_call_error(
            self.provider,
            self.model,
            self.base_url,
            exc,
            timeout_errors=(self._sdk.APITimeoutError,),
            connection_errors=(self._sdk.APIConnectionError,),
        )

    async def aclose(self) -> None:
        """Close the HTTP client this adapter built (one passed in stays open). Idempotent."""
        if self._owns_client:
            await self._client.close()

    def __repr__(self) -> str:
        shown = (
            f"{name}={redact_url(self.base_url) if name == 'base_url' else getattr(self, name)!r}"
            for name in self._repr_fields
        )
        return f"{type(self).__name__}({', '.join(shown)})"


def openai_client(timeout: float, max_retries: int) -> Callable[[Any, str | None], Any]:
    """How an adapter over the ``openai`` SDK builds its client from a credential (the
    ``build`` of :meth:`SDKClientAdapter._open_client`); chat and embedding models share it."""

    def build(credential: Any, base_url: str | None) -> Any:
        import openai  # here: importing a package must not import the SDK

        return openai.AsyncOpenAI(
            api_key=credential.get_api_key(),
            base_url=base_url,
            organization=getattr(credential, "organization", None),
            timeout=timeout,
            max_retries=max_retries,
        )

    return build
