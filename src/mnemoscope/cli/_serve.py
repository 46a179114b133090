"""``mnemoscope serve module:factory``: the agent service over uvicorn workers."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from mnemoscope.errors import UserError


def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve an agent factory over HTTP (sessions, SSE replies) for many users",
        description="Serve module:function(user_id, session_id) -> Agent as an HTTP API "
        "(see docs/service.md). Several --workers, or several machines, share the "
        "sessions through one --store (redis:// or postgresql://).",
    )
    p.add_argument("factory", help="the agent factory, module:function")
    p.add_argument(
        "--store",
        default="memory://",
        help="memory:// (one worker), redis://host:6379/0 or postgresql://user@host/db",
    )
    p.add_argument("--tokens", required=True, help="token file: 'token user_id' lines or JSON")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--busy-policy", choices=["reject", "enqueue", "interrupt"], default="reject")
    p.add_argument("--lock-ttl", type=float, default=15.0, help="seconds (default 15)")
    p.add_argument("--poll-interval", type=float, default=1.0, help="seconds (default 1)")
    p.add_argument("--queue-timeout", type=float, default=60.0, help="seconds (default 60)")
    p.add_argument(
        "--shutdown-deadline",
        type=float,
        default=10.0,
        help="seconds running replies may take to finish on shutdown (default 10)",
    )
    p.add_argument("--log-level", default="warning")
    p.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from mnemoscope._optional import require
    from mnemoscope.service import ENV_PREFIX, app_from_env

    uvicorn = require("uvicorn", extra="service", feature="mnemoscope serve")
    if args.workers < 1:
        raise UserError(f"--workers must be at least 1, got {args.workers}")
    if args.workers > 1 and args.store.startswith("memory://"):
        raise UserError(
            "--workers > 1 needs a shared --store (redis://... or postgresql://...): "
            "memory:// lives in one process"
        )
    settings = {
        ENV_PREFIX + "FACTORY": args.factory,
        ENV_PREFIX + "STORE": args.store,
        ENV_PREFIX + "TOKENS": os.path.abspath(args.tokens),
        ENV_PREFIX + "BUSY_POLICY": args.busy_policy,
        ENV_PREFIX + "LOCK_TTL": str(args.lock_ttl),
        ENV_PREFIX + "POLL_INTERVAL": str(args.poll_interval),
        ENV_PREFIX + "QUEUE_TIMEOUT": str(args.queue_timeout),
        ENV_PREFIX + "SHUTDOWN_DEADLINE": str(args.shutdown_deadline),
    }
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    app_from_env(settings)  # fail here, with one clear line, rather than in every worker
    os.environ.update(settings)  # what each worker process builds its app from
    uvicorn.run(
        "mnemoscope.service._asgi:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        timeout_graceful_shutdown=max(1, int(args.shutdown_deadline)),
    )
    return 0
