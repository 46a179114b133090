"""``mnemoscope serve module:factory``: the agent service over uvicorn workers.

With ``--inspector`` the same app also serves the inspector under ``/inspector``, signed
in by the service's own token check (the service offers ``mounts=``; the inspector sits
above it, so the two are put together here, in the top layer)::

    mnemoscope serve myapp.agents:make_agent --tokens tokens.txt --store redis://... \
        --inspector --inspector-store redis://... --inspector-workdir '/srv/agents/{user_id}'
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping
from typing import Any

from mnemoscope.cli._inspect import SHOWN_OPTIONS, inspector_app
from mnemoscope.errors import UserError

INSPECTOR_PATH = "/inspector"
"""Where ``--inspector`` mounts the inspector in the service's app."""

INSPECTOR_ENV = "MNEMOSCOPE_SERVICE_INSPECTOR_"
"""Variables (``ON``, ``STORE``, ``PREFIX``, ``LTM``, ``MEM0``, ``WORKDIR``, ``AUDIT``,
``EMBEDDING``)
that carry the ``--inspector-*`` options to each uvicorn worker."""


def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve an agent factory over HTTP (sessions, SSE replies) for many users",
        description="Serve module:function(user_id, session_id) -> Agent as an HTTP API "
        "(see docs/service.md). Several --workers, or several machines, share the "
        "sessions through one --store (sqlite:/// for the workers of one machine, redis:// "
        "or postgresql:// for any).",
    )
    p.add_argument("factory", help="the agent factory, module:function")
    p.add_argument(
        "--store",
        default="memory://",
        help="memory:// (one worker), sqlite:///service.db (workers of one machine), "
        "redis://host:6379/0 or postgresql://user@host/db",
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
    g = p.add_argument_group(
        "inspector", f"serve the inspector web page under {INSPECTOR_PATH}, same tokens"
    )
    g.add_argument("--inspector", action="store_true", help=f"mount it at {INSPECTOR_PATH}")
    g.add_argument(
        "--inspector-store",
        metavar="URL",
        help="the agents' short-term memory (sqlite+aiosqlite://, postgresql+asyncpg://, redis://)",
    )
    g.add_argument("--inspector-prefix", metavar="P", help="its table/key prefix (mnemoscope)")
    g.add_argument("--inspector-ltm", metavar="PATH", help="a LocalLongTermMemory file")
    g.add_argument(
        "--inspector-mem0",
        metavar="DIR",
        help="instead of --inspector-ltm: a mem0 local Qdrant directory (one worker only)",
    )
    g.add_argument(
        "--inspector-workdir", metavar="DIR", help="agentic memory workdir with {user_id} in it"
    )
    g.add_argument(
        "--inspector-audit", metavar="FILE", help="audit log (default mnemoscope_audit.db)"
    )
    g.add_argument(
        "--inspector-embedding", choices=("local", "hash"), help="the long-term store's embedder"
    )
    p.set_defaults(handler=run_serve)


def _inspector_settings(args: argparse.Namespace) -> dict[str, str]:
    """The ``MNEMOSCOPE_SERVICE_INSPECTOR_*`` variables for these arguments."""
    given = {k: getattr(args, f"inspector_{k}") for k in SHOWN_OPTIONS}
    given = {k: v for k, v in given.items() if v is not None}
    if not args.inspector:
        if given:
            flags = ", ".join(f"--inspector-{k}" for k in given)
            raise UserError(f"{flags} given without --inspector: add --inspector to serve it")
        return {}
    if not any(k in given for k in ("store", "ltm", "mem0", "workdir")):
        raise UserError(
            "--inspector needs something to show: --inspector-store URL, --inspector-ltm "
            "PATH, --inspector-mem0 DIR or --inspector-workdir DIR"
        )
    if "mem0" in given and args.workers > 1:
        raise UserError(
            "--inspector-mem0 needs --workers 1: a local Qdrant directory opens in one process only"
        )
    for k in ("ltm", "mem0", "workdir", "audit"):  # each worker resolves paths from its own cwd
        if k in given:
            given[k] = os.path.abspath(given[k])
    given.setdefault("audit", os.path.abspath("mnemoscope_audit.db"))
    return {INSPECTOR_ENV + "ON": "1"} | {INSPECTOR_ENV + k.upper(): v for k, v in given.items()}


def inspector_mounts(environ: Mapping[str, str]) -> dict[str, Any]:
    """``mounts=`` for the service: the inspector at ``/inspector`` if the variables ask."""
    if environ.get(INSPECTOR_ENV + "ON") != "1":
        return {}
    options = {k: environ.get(INSPECTOR_ENV + k.upper()) or None for k in SHOWN_OPTIONS}

    def build(mount: Any) -> Any:
        from mnemoscope.inspector import ServiceEventCallSource

        return inspector_app(
            options,
            auth=mount.authenticate,  # the service's own token check: one token list
            calls=ServiceEventCallSource(mount.store),  # what the agent recorded per call
            single_user=False,
        )

    return {INSPECTOR_PATH: build}


def app_from_env() -> Any:
    """What each uvicorn worker runs: the service's app, with the inspector if asked."""
    from mnemoscope.service import app_from_env as service_app_from_env

    return service_app_from_env(os.environ, mounts=inspector_mounts(os.environ))


def _check_inspector(settings: Mapping[str, str]) -> None:
    """Build the inspector once, and close it, so a bad option is one line here."""

    from mnemoscope.service import InMemoryServiceStore, ServiceMount

    async def refuse(_token: str) -> None:
        return None

    for build in inspector_mounts(settings).values():
        app = build(ServiceMount(refuse, InMemoryServiceStore()))
        asyncio.run(app.state.inspector.aclose())


def run_serve(args: argparse.Namespace) -> int:
    from mnemoscope._optional import require
    from mnemoscope.service import ENV_PREFIX
    from mnemoscope.service import app_from_env as service_app_from_env

    uvicorn = require("uvicorn", extra="service", feature="mnemoscope serve")
    if args.workers < 1:
        raise UserError(f"--workers must be at least 1, got {args.workers}")
    if args.workers > 1 and args.store.startswith("memory://"):
        raise UserError(
            "--workers > 1 needs a shared --store (sqlite:///..., redis://... or "
            "postgresql://...): "
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
        **_inspector_settings(args),
    }
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    # fail here, with one clear line, rather than in every worker
    service_app_from_env(settings)
    _check_inspector(settings)
    os.environ.update(settings)  # what each worker process builds its app from
    if args.inspector:
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(
            f"mnemoscope serve: the inspector is at http://{host}:{args.port}{INSPECTOR_PATH}/",
            file=sys.stderr,
        )
    uvicorn.run(
        "mnemoscope.cli._serve:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        timeout_graceful_shutdown=max(1, int(args.shutdown_deadline)),
    )
    return 0
