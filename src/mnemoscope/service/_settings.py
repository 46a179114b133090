"""How the service runs replies: :func:`~mnemoscope.service.create_app`'s settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BusyPolicy = Literal["reject", "enqueue", "interrupt"]
BUSY_POLICIES = ("reject", "enqueue", "interrupt")


@dataclass(frozen=True)
class ServiceSettings:
    """The arguments of :func:`~mnemoscope.service.create_app` of the same names."""

    busy_policy: BusyPolicy = "reject"
    lock_ttl: float = 15.0
    poll_interval: float = 1.0
    queue_timeout: float = 60.0
    shutdown_deadline: float = 10.0
