"""Per-call latency of the file tools: mnemoscope (LocalBackend, Bubblewrap) vs AgentScope 2.0.11.

Usage::

    python bench/file_tools.py [--iterations 200] [--as2-python /work/side/as2/bin/python]

The AgentScope part runs in a side virtualenv (env var ``MNEMOSCOPE_AS2_PYTHON`` or the flag);
create it with::

    python -m venv /work/side/as2 && /work/side/as2/bin/pip install agentscope==2.0.11

Each tool is called through its public ``call`` on a 200-line Markdown file (Grep: over 50
such files). mnemoscope's calls run with a permission context (roots enforced by the
backend, read-before-write tracking on); AgentScope's are called with ``_agent_state=None``
(no read tracking). Prints a markdown table of median and p95 per call; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

N_LINES = 200
N_GREP_FILES = 50


def _content(tag: str) -> str:
    return "".join(f"- line {i} about topic {i % 7} {tag}\n" for i in range(N_LINES))


def _summary(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def _setup(root: str) -> str:
    os.makedirs(f"{root}/notes", exist_ok=True)
    for i in range(N_GREP_FILES):
        with open(f"{root}/notes/n{i}.md", "w") as f:
            f.write(_content(f"n{i}"))
    with open(f"{root}/target.md", "w") as f:
        f.write(_content("target"))
    return f"{root}/target.md"


async def _time(fn, n: int) -> list[float]:
    await fn(0)  # warm-up
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        await fn(i + 1)
        out.append(time.perf_counter() - t0)
    return out


async def bench_mnemoscope(kind: str, n: int) -> dict[str, tuple[float, float]]:
    from mnemoscope.permission import PermissionContext, PermissionMode
    from mnemoscope.tool import Edit, Grep, Read, ToolContext, Write
    from mnemoscope.workspace import BubblewrapWorkspace, LocalBackend

    root = os.path.realpath(tempfile.mkdtemp(prefix="bench-ms-"))  # noqa: ASYNC240
    target = _setup(root)
    ws = None
    if kind == "local":
        backend = LocalBackend(cwd=root)
    else:
        ws = BubblewrapWorkspace(workdir=root)
        await ws.initialize()
        backend = ws.get_backend()
    ctx = ToolContext(
        permission_context=PermissionContext(mode=PermissionMode.ACCEPT_EDITS, cwd=root)
    )
    read, write, edit, grep = (
        Read(backend=backend),
        Write(backend=backend),
        Edit(backend=backend),
        Grep(backend=backend),
    )
    results = {}
    try:

        async def do_read(i):
            r = await read.call(read.Input(file_path=target), ctx)
            assert not r.is_error, r.output

        async def do_write(i):
            r = await write.call(write.Input(file_path=target, content=_content(f"w{i}")), ctx)
            assert not r.is_error, r.output

        async def do_edit(i):
            r = await edit.call(
                edit.Input(file_path=target, old_string="line 7 about", new_string="line 7 ABOUT"),
                ctx,
            )
            assert not r.is_error, r.output
            r = await edit.call(
                edit.Input(file_path=target, old_string="line 7 ABOUT", new_string="line 7 about"),
                ctx,
            )
            assert not r.is_error, r.output

        async def do_grep(i):
            r = await grep.call(
                grep.Input(
                    pattern="topic 3 n1", path=f"{root}/notes", output_mode="files_with_matches"
                ),
                ctx,
            )
            assert not r.is_error, r.output

        results["Read"] = _summary(await _time(do_read, n))
        results["Write"] = _summary(await _time(do_write, n))
        edit_samples = await _time(do_edit, n // 2)
        results["Edit"] = _summary([s / 2 for s in edit_samples])
        results["Grep (50 files)"] = _summary(await _time(do_grep, max(n // 4, 5)))
    finally:
        if ws is not None:
            await ws.close()
        shutil.rmtree(root, ignore_errors=True)
    return results


AS2_SCRIPT = r"""
import asyncio, json, os, shutil, statistics, sys, tempfile, time
N_LINES, N_GREP = __N_LINES__, __N_GREP__
n = int(sys.argv[1])
def content(tag):
    return "".join(f"- line {i} about topic {i % 7} {tag}\n" for i in range(N_LINES))
def summary(s):
    s = sorted(s); return statistics.median(s), s[int(0.95 * (len(s) - 1))]
async def timed(fn, n):
    await fn(0); out = []
    for i in range(n):
        t0 = time.perf_counter(); await fn(i + 1); out.append(time.perf_counter() - t0)
    return out
async def main():
    from agentscope.tool import Read, Write, Edit, Grep, LocalBackend
    root = os.path.realpath(tempfile.mkdtemp(prefix="bench-as2-"))
    os.makedirs(f"{root}/notes")
    for i in range(N_GREP):
        open(f"{root}/notes/n{i}.md", "w").write(content(f"n{i}"))
    target = f"{root}/target.md"; open(target, "w").write(content("target"))
    b = LocalBackend()
    read, write, edit, grep = Read(backend=b), Write(backend=b), Edit(backend=b), Grep(backend=b)
    def ok(chunk):
        st = getattr(chunk, "state", None)
        assert "error" not in str(st).lower(), chunk
    async def do_read(i): ok(await read.call(file_path=target))
    async def do_write(i): ok(await write.call(file_path=target, content=content(f"w{i}")))
    async def do_edit(i):
        ok(await edit.call(file_path=target, old_string="line 7 about", new_string="line 7 ABOUT"))
        ok(await edit.call(file_path=target, old_string="line 7 ABOUT", new_string="line 7 about"))
    async def do_grep(i):
        ok(await grep.call(pattern="topic 3 n1", path=f"{root}/notes",
                           output_mode="files_with_matches"))
    res = {}
    res["Read"] = summary(await timed(do_read, n))
    res["Write"] = summary(await timed(do_write, n))
    res["Edit"] = summary([s / 2 for s in await timed(do_edit, n // 2)])
    try:
        res["Grep (50 files)"] = summary(await timed(do_grep, max(n // 4, 5)))
    except Exception as exc:
        res["Grep (50 files)"] = f"failed: {type(exc).__name__}: {exc}"[:80]
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(res))
asyncio.run(main())
""".replace("__N_LINES__", str(N_LINES)).replace("__N_GREP__", str(N_GREP_FILES))


def bench_as2(python: str, n: int) -> dict | str:
    if not os.path.exists(python):
        return (
            f"not installed ({python}); create it with: python -m venv /work/side/as2 && "
            "/work/side/as2/bin/pip install agentscope==2.0.11"
        )
    proc = subprocess.run(
        [python, "-c", AS2_SCRIPT, str(n)], capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        return "failed: " + proc.stderr.strip().splitlines()[-1][:200]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fmt(v) -> str:
    if isinstance(v, str):
        return v
    med, p95 = v
    return f"{med * 1e3:.2f} / {p95 * 1e3:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument(
        "--as2-python", default=os.environ.get("MNEMOSCOPE_AS2_PYTHON", "/work/side/as2/bin/python")
    )
    args = ap.parse_args()
    cols: dict[str, dict | str] = {}
    cols["mnemoscope LocalBackend"] = asyncio.run(bench_mnemoscope("local", args.iterations))
    if shutil.which("bwrap"):
        cols["mnemoscope Bubblewrap"] = asyncio.run(bench_mnemoscope("bubblewrap", args.iterations))
    else:
        cols["mnemoscope Bubblewrap"] = "bwrap not installed (apt-get install bubblewrap)"
    cols["AgentScope 2.0.11 LocalBackend"] = bench_as2(args.as2_python, args.iterations)
    ops = ["Read", "Write", "Edit", "Grep (50 files)"]
    print(
        f"File tools, per call, median / p95 in ms ({args.iterations} iterations, "
        f"{N_LINES}-line file; Python {sys.version.split()[0]}, {os.cpu_count()} CPUs)\n"
    )
    print("| tool | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for op in ops:
        cells = [(_fmt(c.get(op, "-")) if isinstance(c, dict) else c) for c in cols.values()]
        print(f"| {op} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
