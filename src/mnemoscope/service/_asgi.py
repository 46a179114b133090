"""The app ``mnemoscope serve`` runs in each uvicorn worker, configured by environment.

``mnemoscope serve`` checks its arguments, puts them in ``MNEMOSCOPE_SERVICE_*`` variables
and starts uvicorn on :func:`app_from_env` (``factory=True``), so every worker process
builds the same app. You can do the same without the CLI::

    MNEMOSCOPE_SERVICE_FACTORY=myapp:make_agent MNEMOSCOPE_SERVICE_TOKENS=tokens.txt \\
    MNEMOSCOPE_SERVICE_STORE=redis://cache:6379/0 \\
    uvicorn --factory mnemoscope.service._asgi:app_from_env --workers 4
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from mnemoscope.errors import UserError

ENV_PREFIX = "MNEMOSCOPE_SERVICE_"
SETTINGS = {
    # variable suffix -> (create_app keyword, type)
    "BUSY_POLICY": ("busy_policy", str),
    "LOCK_TTL": ("lock_ttl", float),
    "POLL_INTERVAL": ("poll_interval", float),
    "QUEUE_TIMEOUT": ("queue_timeout", float),
    "SHUTDOWN_DEADLINE": ("shutdown_deadline", float),
}


def app_from_env(
    environ: Mapping[str, str] | None = None, *, mounts: Mapping[str, Any] | None = None
) -> Any:
    """Build the app from ``MNEMOSCOPE_SERVICE_FACTORY``, ``_STORE``, ``_TOKENS`` and the
    optional ``_BUSY_POLICY``, ``_LOCK_TTL``, ``_POLL_INTERVAL``, ``_QUEUE_TIMEOUT``,
    ``_SHUTDOWN_DEADLINE``; ``mounts`` as :func:`~mnemoscope.service.create_app`'s."""
    from mnemoscope.service._app import create_app

    env = os.environ if environ is None else environ
    factory = env.get(ENV_PREFIX + "FACTORY")
    tokens = env.get(ENV_PREFIX + "TOKENS")
    if not factory or not tokens:
        raise UserError(
            f"set {ENV_PREFIX}FACTORY (module:function) and {ENV_PREFIX}TOKENS (token file)"
        )
    if os.getcwd() not in sys.path:  # the factory module is found as `uvicorn` finds apps
        sys.path.insert(0, os.getcwd())
    kwargs: dict[str, Any] = {}
    for suffix, (name, kind) in SETTINGS.items():
        raw = env.get(ENV_PREFIX + suffix)
        if raw:
            try:
                kwargs[name] = kind(raw)
            except ValueError as exc:
                raise UserError(f"{ENV_PREFIX}{suffix}={raw!r}: {exc}") from exc
    store = env.get(ENV_PREFIX + "STORE", "memory://")
    return create_app(factory, store=store, auth=tokens, mounts=mounts, **kwargs)
