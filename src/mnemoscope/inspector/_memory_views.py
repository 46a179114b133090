"""Long-term memory pages: the native store or mem0 (search, edit, delete, history), the
agentic Markdown memory (``MEMORY.md``, memory files, ``doctor`` findings) and the audit log.

Every edit goes through the store's own API (the long-term store's ``update``/``delete``
through :mod:`~mnemoscope.inspector._ltm_views`, ``MemoryStore.write_text``/``write_index``
with the version read), so the store's checks apply: confinement of the memory directory,
refusal of links, optimistic concurrency. Each one is then recorded in the
:class:`~mnemoscope.inspector.AuditLog`.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any

from mnemoscope.errors import MemoryStoreError, UserError
from mnemoscope.inspector._app import Inspector, NotFoundError, Signed, form_of
from mnemoscope.inspector._html import badge, csrf_field, e, url
from mnemoscope.inspector._ltm_views import LongTermViewBase
from mnemoscope.memory.markdown import INDEX_FILENAME
from mnemoscope.workspace import WorkspaceError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

from starlette.responses import RedirectResponse


# ------------------------------------------------------------- long-term store
def _ltm(insp: Inspector) -> LongTermViewBase:
    if insp.ltm is None:
        raise NotFoundError(
            "no long-term memory store is configured (start with --ltm PATH or --mem0 DIR)"
        )
    return insp.ltm


async def _owned_item(insp: Inspector, who: Signed, memory_id: str) -> Any:
    """The user's memory ``memory_id`` (``None`` when it was deleted but was theirs)."""
    ltm = _ltm(insp)
    item = await ltm.get(memory_id, user_id=who.user) if memory_id else None
    if item is not None:
        return item
    if memory_id and await ltm.deleted_owner(memory_id) == who.user:
        return None
    # a store that does not keep owners: the user's own edits through the page prove it
    edits = await insp.audit.entries(who.user, target=memory_id) if memory_id else []
    if any(a.action.startswith("ltm.") for a in edits):
        return None
    raise NotFoundError(f"no memory {memory_id!r}")


def _when(at: Any) -> str:
    return at.strftime("%Y-%m-%d %H:%M") if at is not None else ""


def _validity(f: Any) -> str:
    if f.valid:
        return badge("valid", "ok")
    return badge("invalid", "bad") + " " + e("; ".join(f.errors))


def _status(item: Any) -> str:
    status = getattr(item, "status", "active")
    return badge(status, "superseded" if status == "superseded" else "ok")


async def memory_list(insp: Inspector, request: Request, who: Signed) -> Response:
    ltm = insp.ltm
    if ltm is None:
        body = (
            "<h1>Long-term memory</h1><p class=notice>No long-term store configured "
            "(--ltm PATH or --mem0 DIR).</p>"
        )
        return insp.page(who, "Long-term memory", body, "memory")
    q = request.query_params.get("q", "").strip()
    try:
        page = max(1, int(request.query_params.get("page", "1")))
    except ValueError:
        page = 1
    size = insp.page_size
    more = False
    if q:
        items = await ltm.search(q, who.user, limit=50)
        title = f"{len(items)} memories match {q!r}"
    else:
        items = await ltm.memories(who.user, limit=size + 1, offset=(page - 1) * size)
        more = len(items) > size
        items = items[:size]
        title = f"All memories, {ltm.order} (superseded ones included)"
    rows = "".join(
        f'<tr data-memory="{e(m.id)}"><td><a href="{e(url(who.root, "/memory/item", id=m.id))}">'
        f"{e(m.content)}</a></td><td>{_status(m)}</td>"
        f"<td>{'' if m.score is None else f'{m.score:.3f}'}</td>"
        f"<td>{e(m.updated_at and m.updated_at.strftime('%Y-%m-%d %H:%M'))}</td></tr>"
        for m in items
    )
    nav = ""
    if not q and (page > 1 or more):
        prev = url(who.root, "/memory", page=page - 1) if page > 1 else None
        nxt = url(who.root, "/memory", page=page + 1) if more else None
        nav = (
            '<nav class="pager">'
            + (f'<a rel="prev" href="{e(prev)}">&lsaquo; previous</a>' if prev else "")
            + f"<span>page {page}</span>"
            + (f'<a rel="next" href="{e(nxt)}">next &rsaquo;</a>' if nxt else "")
            + "</nav>"
        )
    body = (
        f"<h1>Long-term memory <span class=badge>{e(ltm.kind)}</span></h1>"
        f'<form method="get" action="{e(url(who.root, "/memory"))}">'
        f'<input type="search" name="q" value="{e(q)}" placeholder="search memories">'
        ' <button type="submit">Search</button></form>'
        f"<h2>{e(title)}</h2>"
        + (
            f"<table><tr><th>memory</th><th>status</th><th>score</th><th>updated</th></tr>"
            f"{rows}</table>{nav}"
            if items
            else "<p class=muted>Nothing found.</p>"
        )
    )
    return insp.page(who, "Long-term memory", body, "memory")


def _history_html(entries: list[Any]) -> str:
    rows = "".join(
        f"<tr><td>{e(h.at.strftime('%Y-%m-%d %H:%M:%S'))}</td><td>{badge(h.event)}</td>"
        f'<td class="text">{e(h.old_content)}</td><td class="text">{e(h.new_content)}</td>'
        f"<td>{e(h.reason)}</td></tr>"
        for h in entries
    )
    return (
        '<table class="history"><tr><th>when</th><th>event</th><th>before</th><th>after</th>'
        f"<th>reason</th></tr>{rows}</table>"
    )


def _audit_html(root: str, entries: list[Any], *, with_target: bool = False) -> str:
    if not entries:
        return "<p class=muted>No edit made through this page yet.</p>"
    rows = "".join(
        f"<tr><td>{e(a.at.strftime('%Y-%m-%d %H:%M:%S'))} UTC</td><td>{e(a.user_id)}</td>"
        f"<td>{badge(a.action, 'tool_result')}</td>"
        + (f"<td>{_target_link(root, a)}</td>" if with_target else "")
        + f'<td class="text">{e(_cut(a.before))}</td><td class="text">{e(_cut(a.after))}</td></tr>'
        for a in entries
    )
    head = "<th>target</th>" if with_target else ""
    return (
        f'<table class="audit"><tr><th>when</th><th>who</th><th>what</th>{head}'
        f"<th>before</th><th>after</th></tr>{rows}</table>"
    )


def _cut(text: str | None, limit: int = 600) -> str:
    if text is None:
        return ""
    return text if len(text) <= limit else text[:limit] + f"… ({len(text):,} characters)"


def _target_link(root: str, a: Any) -> str:
    if a.action.startswith("ltm."):
        return f'<a href="{e(url(root, "/memory/item", id=a.target))}">{e(a.target)}</a>'
    if a.target == INDEX_FILENAME:
        return f'<a href="{e(url(root, "/agentic"))}">{e(a.target)}</a>'
    return f'<a href="{e(url(root, "/agentic/file", name=a.target))}">{e(a.target)}</a>'


async def memory_item(insp: Inspector, request: Request, who: Signed) -> Response:
    memory_id = request.query_params.get("id", "")
    item = await _owned_item(insp, who, memory_id)
    ltm = _ltm(insp)
    # a deleted memory reaches here only when it was the user's (see _owned_item)
    history = await ltm.history(memory_id, user_id=who.user, include_deleted=item is None)
    audit = await insp.audit.entries(who.user, target=memory_id)
    parts = [f"<h1>Memory {e(memory_id)}</h1>"]
    if item is None:
        parts.append('<p class="notice">This memory was deleted; its history remains.</p>')
    else:
        sup = getattr(item, "superseded_by", None)
        supersedes = await ltm.superseded_by(who.user, memory_id)
        parts.append(
            f'<div class="msg"><div class="meta">{_status(item)}'
            f"<span>created {e(_when(item.created_at))}"
            f"</span><span>updated {e(_when(item.updated_at))}"
            f'</span></div><div class="text" id="content">{e(item.content)}</div>'
            f'<div class="muted">metadata: {e(item.metadata)}</div></div>'
        )
        if sup:
            parts.append(
                f'<p>Superseded by <a href="{e(url(who.root, "/memory/item", id=sup))}">'
                f"{e(sup)}</a>.</p>"
            )
        if supersedes:
            links = ", ".join(
                f'<a href="{e(url(who.root, "/memory/item", id=m.id))}">{e(m.content)}</a>'
                for m in supersedes
            )
            parts.append(f"<p>Supersedes: {links}</p>")
        parts.append(
            f'<h2>Edit</h2><form method="post" action="{e(url(who.root, "/memory/item/edit"))}">'
            f'{csrf_field(who.csrf)}<input type="hidden" name="id" value="{e(memory_id)}">'
            f'<textarea name="content">{e(item.content)}</textarea>'
            '<p><button type="submit">Save</button></p></form>'
            f'<form method="post" action="{e(url(who.root, "/memory/item/delete"))}" '
            'data-confirm="Delete this memory? Its history is kept.">'
            f'{csrf_field(who.csrf)}<input type="hidden" name="id" value="{e(memory_id)}">'
            '<button type="submit">Delete</button></form>'
        )
    parts.append(f"<h2>History</h2>{_history_html(history)}")
    parts.append(f"<h2>Edits through this page</h2>{_audit_html(who.root, audit)}")
    return insp.page(who, f"Memory {memory_id}", "".join(parts), "memory")


async def memory_edit(insp: Inspector, request: Request, who: Signed) -> Response:
    form = await form_of(request)
    memory_id = form.get("id", "")
    item = await _owned_item(insp, who, memory_id)
    if item is None:
        raise NotFoundError(f"memory {memory_id!r} was deleted")
    ltm = _ltm(insp)
    await ltm.check_editable()
    try:
        updated = await ltm.update(memory_id, form.get("content", ""), user_id=who.user)
    except KeyError:
        raise NotFoundError(f"no memory {memory_id!r}") from None
    await insp.audit.record(
        who.user, "ltm.update", memory_id, before=item.content, after=updated.content
    )
    return RedirectResponse(url(who.root, "/memory/item", id=memory_id), status_code=303)


async def memory_delete(insp: Inspector, request: Request, who: Signed) -> Response:
    form = await form_of(request)
    memory_id = form.get("id", "")
    item = await _owned_item(insp, who, memory_id)
    if item is None or not await _ltm(insp).delete(memory_id, user_id=who.user):
        raise NotFoundError(f"no memory {memory_id!r}")
    await insp.audit.record(who.user, "ltm.delete", memory_id, before=item.content)
    return RedirectResponse(url(who.root, "/memory"), status_code=303)


# --------------------------------------------------------------- agentic memory
def _store(insp: Inspector, who: Signed) -> Any:
    from mnemoscope.memory.markdown import MemoryStore

    workdir = insp.workdir_for(who.user) if insp.workdir_for is not None else None
    if workdir is None:
        raise NotFoundError("no agentic memory is configured for you (start with --workdir DIR)")
    store = insp.stores.get(workdir)
    if store is None:
        store = insp.stores[workdir] = MemoryStore(workdir)
    return store


async def _read_file(store: Any, name: str) -> tuple[str, str]:
    """``(text, exact version)`` of a memory file, read at its real path (no links)."""
    from mnemoscope.memory.markdown import MAX_MEMORY_FILE_BYTES

    root = await store.confine()
    path = posixpath.join(root, name)
    try:
        res = await store.resolved_backend.read_file(
            path, roots=[root], max_bytes=MAX_MEMORY_FILE_BYTES
        )
    except FileNotFoundError:
        raise NotFoundError(f"no memory file {name!r}") from None
    except WorkspaceError as exc:
        raise MemoryStoreError(f"cannot read {name}: {exc}") from None
    if res.stat.path != path:
        raise MemoryStoreError(f"{name} is a symbolic link or moved; it is not shown")
    return res.data.decode("utf-8", "replace"), res.stat.version


def _editor(root: str, csrf: str, name: str, text: str, version: str) -> str:
    return (
        f'<form method="post" action="{e(url(root, "/agentic/file"))}">{csrf_field(csrf)}'
        f'<input type="hidden" name="name" value="{e(name)}">'
        f'<input type="hidden" name="version" value="{e(version)}">'
        f'<textarea name="text" rows="14">{e(text)}</textarea>'
        '<p><button type="submit">Save</button> <span class=muted>saved only if nobody '
        "changed the file since this page was loaded</span></p></form>"
    )


async def agentic_home(insp: Inspector, request: Request, who: Signed) -> Response:
    from mnemoscope.memory.markdown import diagnose

    store = _store(insp, who)
    index = await store.read_index()
    scan = await store.scan()
    report = await diagnose(store)
    files = "".join(
        f'<tr><td><a href="{e(url(who.root, "/agentic/file", name=f.filename))}">'
        f"{e(f.filename)}</a></td><td>{e(f.name)}</td><td>{e(f.type)}</td>"
        f"<td>{e(f.description)}</td><td>"
        + (
            badge("valid", "ok")
            if f.valid
            else badge("invalid", "bad") + " " + e("; ".join(f.errors))
        )
        + f"</td><td>{e(f.age())}</td></tr>"
        for f in scan.files
    )
    findings = "".join(
        f"<li>{badge(x.kind, 'hint')} {e(x.message)}"
        + (
            " <span class=muted>(fixable: mnemoscope memory doctor --fix)</span>"
            if x.fixable
            else ""
        )
        + "</li>"
        for x in report.findings
    )
    edits = [a for a in await insp.audit.entries(who.user) if a.action.startswith("agentic.")]
    if index.complete:
        index_html = _editor(who.root, who.csrf, INDEX_FILENAME, index.text, index.version)
    else:
        index_html = (
            '<p class="notice">MEMORY.md is over the read limit: shown in part, not editable '
            f'here.</p><div class="text">{e(index.text)}</div>'
        )
    body = (
        f"<h1>Markdown memory</h1><p class=muted>{e(store.memdir)}</p>"
        f"<h2>MEMORY.md</h2>{index_html}"
        f"<h2>Memory files ({len(scan.files)})</h2>"
        + (
            "<table><tr><th>file</th><th>name</th><th>type</th><th>description</th>"
            f"<th>status</th><th>age</th></tr>{files}</table>"
            if scan.files
            else "<p class=muted>No memory files.</p>"
        )
        + "<h2>Doctor</h2>"
        + (f'<ul class="findings">{findings}</ul>' if findings else "<p>No problem found.</p>")
        + f"<h2>Edits through this page</h2>{_audit_html(who.root, edits, with_target=True)}"
    )
    return insp.page(who, "Markdown memory", body, "agentic")


async def agentic_file(insp: Inspector, request: Request, who: Signed) -> Response:
    store = _store(insp, who)
    name = request.query_params.get("name", "")
    if name == INDEX_FILENAME:
        return RedirectResponse(url(who.root, "/agentic"), status_code=303)
    found = (await store.scan()).by_name().get(name)
    if found is None:
        raise NotFoundError(f"no memory file {name!r}")
    text, version = await _read_file(store, name)
    status = (
        badge("valid", "ok")
        if found.valid
        else badge("invalid", "bad") + " " + e("; ".join(found.errors))
    )
    edits = await insp.audit.entries(who.user, target=name)
    body = (
        f"<h1>{e(name)}</h1><p>{status} <b>{e(found.name)}</b> · {e(found.type)} · "
        f"{e(found.description)} · {e(found.age())}</p>"
        + _editor(who.root, who.csrf, name, text, version)
        + f"<h2>Edits through this page</h2>{_audit_html(who.root, edits)}"
    )
    return insp.page(who, name, body, "agentic")


async def agentic_write(insp: Inspector, request: Request, who: Signed) -> Response:
    store = _store(insp, who)
    form = await form_of(request)
    name, text, version = form.get("name", ""), form.get("text", ""), form.get("version", "")
    text = text.replace("\r\n", "\n")  # browsers send textarea lines with CRLF
    if not version:
        raise UserError("the form has no file version: reload the page and edit again")
    if name == INDEX_FILENAME:
        before = (await store.read_index()).text
        await store.write_index(text, expected_version=version)
        target = url(who.root, "/agentic")
    else:
        if name not in (await store.scan()).by_name():
            raise NotFoundError(f"no memory file {name!r}")
        before, _ = await _read_file(store, name)
        await store.write_text(name, text, expected_version=version)
        target = url(who.root, "/agentic/file", name=name)
    await insp.audit.record(who.user, "agentic.write", name, before=before, after=text)
    return RedirectResponse(target, status_code=303)


async def audit_page(insp: Inspector, request: Request, who: Signed) -> Response:
    entries = await insp.audit.entries(who.user, limit=500)
    body = (
        "<h1>Audit log</h1><p class=muted>Every edit you made through the inspector, newest "
        f"first.</p>{_audit_html(who.root, entries, with_target=True)}"
    )
    return insp.page(who, "Audit log", body, "audit")
