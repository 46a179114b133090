"""Permissions: one engine decides every tool call (allow / deny / ask)."""

from mnemoscope.permission._context import PermissionContext, is_within, resolve_path
from mnemoscope.permission._secrets import SECRET_LOCATIONS
from mnemoscope.permission._types import (
    AdditionalWorkingDirectory,
    AskCallback,
    Behavior,
    PermissionDecision,
    PermissionMode,
    PermissionRequest,
    PermissionRule,
)

__all__ = [
    "SECRET_LOCATIONS",
    "AdditionalWorkingDirectory",
    "AskCallback",
    "Behavior",
    "PermissionContext",
    "PermissionDecision",
    "PermissionMode",
    "PermissionRequest",
    "PermissionRule",
    "is_within",
    "resolve_path",
]
