"""Helper processes for :class:`~mnemoscope.workspace.LocalBackend`'s greps.

A regular expression can backtrack for hours (``(a+)+$``) and holds the GIL while it
does, so a grep in a thread would freeze the event loop and could not be stopped. Each
grep runs instead in a helper process (``python -I -S _fsops.py serve``, the same helper
the sandboxes run), which stops itself at the grep's time limit (``SIGALRM``, see
``_fsops_search``). The process is killed when the call is cancelled, or
:data:`BACKSTOP_SECONDS` after the limit if it is still running. Idle helpers are kept
(at most :data:`MAX_IDLE`, shared by every backend of this process) so that a grep costs
a pipe round trip, not an interpreter start; concurrent greps each get their own.

The blocking pipe I/O runs in a worker thread (the loop only waits), so the helpers are
tied to no event loop.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import subprocess
import sys
import threading
from typing import Any

from mnemoscope.workspace import _fsops
from mnemoscope.workspace._base import WorkspaceError, helper_answer, helper_request, make_error

BACKSTOP_SECONDS = 5.0
"""A helper still busy this long after the call's own time limit is killed."""
MAX_IDLE = 2
"""Idle helper processes kept for the next greps."""

_Proc = subprocess.Popen[bytes]
_idle: list[_Proc] = []
_busy: set[_Proc] = set()
_lock = threading.Lock()


def busy_pids() -> list[int]:
    """Process ids of the helpers running a call now (for diagnostics and tests)."""
    with _lock:
        return [p.pid for p in _busy]


def _spawn() -> _Proc:
    return subprocess.Popen(
        [sys.executable, "-I", "-S", _fsops.helper_paths()["_fsops.py"], "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )


def _take() -> _Proc:
    with _lock:
        while _idle:
            proc = _idle.pop()
            if proc.poll() is None:
                _busy.add(proc)
                return proc
            _close(proc)
    proc = _spawn()
    with _lock:
        _busy.add(proc)
    return proc


def _close(proc: _Proc) -> None:
    """Kill (if needed), reap and close the pipes of ``proc`` (blocking, briefly)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def _round_trip(proc: _Proc, request: bytes) -> bytes:
    """Send one request and read its answer (in a thread). A helper that answered goes
    back to the idle list; one that did not (killed, crashed) is reaped here."""
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(request)
        proc.stdin.flush()
        answer = proc.stdout.readline()
    except (OSError, ValueError):
        answer = b""
    with _lock:
        _busy.discard(proc)
        keep = answer.endswith(b"\n") and proc.poll() is None and len(_idle) < MAX_IDLE
        if keep:
            _idle.append(proc)
    if not keep:
        _close(proc)
    return answer


async def _kill(proc: _Proc) -> None:
    """Stop a helper whose call is abandoned; returns once it is reaped."""
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    await asyncio.shield(asyncio.to_thread(proc.wait))


async def call(op: str, args: dict[str, Any], *, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109 - the helper's own limit, plus a backstop
    """Run one ``_fsops`` operation in a helper process; see the module docstring.

    Raises:
        WorkspaceError: what the operation raised; ``too_slow`` when the helper had to
            be killed by the backstop; ``unavailable`` when it died.
    """
    request = helper_request(op, args).encode() + b"\n"
    proc = await asyncio.to_thread(_take)
    try:
        answer = await asyncio.wait_for(
            asyncio.to_thread(_round_trip, proc, request), timeout + BACKSTOP_SECONDS
        )
    except TimeoutError:
        await _kill(proc)
        raise make_error(
            "too_slow",
            f"{op} did not finish within {timeout + BACKSTOP_SECONDS:g} s and was stopped; "
            "narrow the search with path or glob, or simplify the pattern.",
        ) from None
    except BaseException:  # cancelled: the search must not outlive its caller
        await _kill(proc)
        raise
    if not answer.endswith(b"\n"):
        raise WorkspaceError(
            f"the {op} helper process exited (code {proc.returncode}) without answering",
            "unavailable",
        )
    return helper_answer(answer)


@atexit.register
def _shutdown() -> None:
    with _lock:
        procs, _idle[:] = list(_idle), []
    for proc in procs:
        if proc.stdin is not None:
            proc.stdin.close()  # the helper exits at end of input
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        _close(proc)


def _forget_after_fork() -> None:
    # a forked child must not talk to its parent's helpers
    _idle.clear()
    _busy.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
