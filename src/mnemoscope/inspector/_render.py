"""HTML of a conversation page: messages, marks as badges, tool calls with their results,
summaries with links to what they cover."""

from __future__ import annotations

import json
from collections.abc import Sequence

from mnemoscope.inspector._calls import summary_covers
from mnemoscope.inspector._html import badge, e, url
from mnemoscope.inspector._sessions import StoredEntry
from mnemoscope.message import (
    HintBlock,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

SHOWN_CHARS = 4_000
"""Longer texts are shown cut, with the rest behind a "show all" toggle."""


def _text_html(text: str, cls: str = "text") -> str:
    if len(text) <= SHOWN_CHARS:
        return f'<div class="{cls}">{e(text)}</div>'
    return (
        f'<div class="{cls}">{e(text[:SHOWN_CHARS])}</div>'
        f"<details><summary>show all {len(text):,} characters</summary>"
        f'<div class="{cls}">{e(text[SHOWN_CHARS:])}</div></details>'
    )


def covered_ids(entry: StoredEntry) -> list[str] | None:
    """The ids a summary covers, from its metadata (``None``: not a summary with ids)."""
    if entry.msg is None:
        return None
    return summary_covers(entry.msg) or None


def _result_html(result: ToolResultBlock) -> str:
    cls = "result" if result.state == "success" else "result error"
    state = "" if result.state == "success" else f" [{result.state}]"
    return f'<div class="{cls}">→ {e(result.name)}{e(state)}: ' + (
        f"{_text_html(result.output_text(), 'inner')}</div>"
    )


def render_entries(
    entries: Sequence[StoredEntry],
    *,
    before: StoredEntry | None,
    after: StoredEntry | None,
    root: str,
    session_id: str,
    reply_starts: set[str],
) -> str:
    """The messages of a page. ``before``/``after`` are the neighbours just outside it,
    used only to pair a tool call with its result across the page boundary."""
    window = [before, *entries, after]
    out: list[str] = []
    for i, entry in enumerate(entries, 1):
        prev, nxt = window[i - 1], window[i + 1]
        out.append(_entry_html(entry, prev, nxt, root, session_id, reply_starts))
    return "".join(out)


def _results_of(nxt: StoredEntry | None) -> dict[str, ToolResultBlock]:
    if nxt is None or nxt.msg is None:
        return {}
    return {b.id: b for b in nxt.msg.content if isinstance(b, ToolResultBlock)}


def _uses_of(prev: StoredEntry | None) -> dict[str, ToolUseBlock]:
    if prev is None or prev.msg is None:
        return {}
    return {b.id: b for b in prev.msg.content if isinstance(b, ToolUseBlock)}


def _entry_html(
    entry: StoredEntry,
    prev: StoredEntry | None,
    nxt: StoredEntry | None,
    root: str,
    session_id: str,
    reply_starts: set[str],
) -> str:
    anchor = f"m-{entry.msg_id}"
    if entry.msg is None:
        return (
            f'<div class="msg" id="{e(anchor)}"><div class="meta">#{entry.position + 1} '
            f'<span class="ids">{e(entry.msg_id)}</span>{badge("corrupt", "bad")}</div>'
            f'<p class="error">stored JSON could not be decoded: {e(entry.error)}</p></div>'
        )
    m = entry.msg
    classes = ["msg", m.role, *(f"marked-{k}" for k in entry.marks if k.isidentifier())]
    meta = [
        f"<span>#{entry.position + 1}</span>",
        f"<b>{e(m.role)}</b>",
        f"<span>{e(m.name)}</span>",
        f"<span>{e(m.timestamp.strftime('%Y-%m-%d %H:%M:%S'))}</span>",
        f'<span class="ids">{e(m.id)}</span>',
        *(badge(k) for k in entry.marks),
    ]
    if m.id in reply_starts:
        link = url(root, "/session/calls", sid=session_id, msg=m.id)
        meta.append(f'<a href="{e(link)}">model calls of this reply</a>')
    results = _results_of(nxt)
    uses = _uses_of(prev)
    body: list[str] = []
    for b in m.content:
        if isinstance(b, TextBlock):
            body.append(_text_html(b.text))
        elif isinstance(b, ThinkingBlock):
            body.append(
                f"<details><summary class=thinking>thinking</summary>"
                f"{_text_html(b.thinking, 'text thinking')}</details>"
            )
        elif isinstance(b, ToolUseBlock):
            res = results.get(b.id)
            args = json.dumps(b.input, ensure_ascii=False, indent=1, default=str)
            result = (
                _result_html(res)
                if res is not None
                else ('<div class="result muted">no result stored right after this call</div>')
            )
            body.append(
                f'<div class="pair" data-tool-use="{e(b.id)}">'
                f'<div class="call">{badge("tool call", "tool_result")} {e(b.name)}'
                f"({e(args)})</div>{result}</div>"
            )
        elif isinstance(b, ToolResultBlock):
            if b.id in uses:
                body.append(
                    f'<div class="muted">result of {e(b.name)} · shown with its call above '
                    f'(<span class="ids">{e(b.id)}</span>)</div>'
                )
            else:
                body.append(f'<div class="pair">{_result_html(b)}</div>')
        elif isinstance(b, HintBlock):
            src = f" from {b.source}" if b.source else ""
            body.append(f'<div class="text">{badge("hint" + src, "hint")} {e(b.hint)}</div>')
        elif isinstance(b, ImageBlock):
            body.append('<div class="muted">[image]</div>')
    covers = covered_ids(entry)
    if covers is not None:
        links = ", ".join(
            f'<a href="{e(url(root, "/session/message", sid=session_id, msg=c))}">{e(c)}</a>'
            for c in covers[:200]
        )
        more = f" and {len(covers) - 200} more" if len(covers) > 200 else ""
        body.append(
            f'<div class="covers">{badge("summary")} covers {len(covers)} messages: '
            f'<span class="ids">{links}{e(more)}</span></div>'
        )
    return (
        f'<div class="{e(" ".join(classes))}" id="{e(anchor)}">'
        f'<div class="meta">{"".join(meta)}</div>{"".join(body)}</div>'
    )
