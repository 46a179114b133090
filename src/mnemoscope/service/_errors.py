"""Errors of the service layer (below :class:`~mnemoscope.errors.MnemoscopeError`)."""

from __future__ import annotations

from mnemoscope.errors import MnemoscopeError


class ServiceStoreError(MnemoscopeError):
    """The service store (Redis, PostgreSQL) could not be reached or refused a command;
    requests that need it answer 503."""
