"""Page layout, styles and the little JavaScript of the inspector (no build step, no CDN).

Every value that reaches a page goes through :func:`e` (HTML escaping, quotes included);
pages are plain strings assembled by the view functions.
"""

from __future__ import annotations

import html
from urllib.parse import urlencode

CSS = """
:root { --fg:#1d232a; --muted:#667; --line:#dde1e6; --bg:#f6f7f9; --card:#fff;
  --accent:#2456c8; --warn:#a35a00; --bad:#b42318; --ok:#1f7a3a; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  color:var(--fg); background:var(--bg); }
header { display:flex; gap:1.2rem; align-items:center; padding:.6rem 1.2rem;
  background:#12223f; color:#fff; }
header a { color:#cfe0ff; text-decoration:none; } header a.here { color:#fff; font-weight:600; }
header .who { margin-left:auto; color:#cfe0ff; }
header form { display:inline; } header button { font-size:12px; }
main { max-width:1100px; margin:0 auto; padding:1rem 1.2rem 3rem; }
h1 { font-size:1.3rem; margin:.2rem 0 1rem; } h2 { font-size:1.05rem; margin:1.4rem 0 .6rem; }
a { color:var(--accent); }
table { border-collapse:collapse; width:100%; background:var(--card); }
th, td { text-align:left; padding:.35rem .6rem; border-bottom:1px solid var(--line);
  vertical-align:top; }
th { background:#eef1f5; font-weight:600; }
.msg { background:var(--card); border:1px solid var(--line); border-radius:6px;
  margin:.5rem 0; padding:.5rem .7rem; }
.msg.assistant { border-left:4px solid var(--accent); }
.msg.user { border-left:4px solid #7a8699; }
.msg.system { border-left:4px solid #999; }
.msg.marked-summary { border-left-color:var(--ok); background:#f3faf5; }
.msg.marked-hint { border-left-color:var(--warn); background:#fffaf2; }
.msg:target { outline:3px solid #f5c84c; }
.meta { color:var(--muted); font-size:12px; display:flex; gap:.6rem; flex-wrap:wrap;
  align-items:center; }
.badge { display:inline-block; padding:0 .45rem; border-radius:9px; font-size:11px;
  background:#e6e9ef; color:#334; border:1px solid #cfd5de; }
.badge.summary { background:#dcf3e3; border-color:#9fd5b0; color:#135c2b; }
.badge.hint { background:#fdefd9; border-color:#f0c98a; color:#7a4300; }
.badge.tool_result { background:#e3ebfb; border-color:#a9c0ee; color:#1c3f8a; }
.badge.pinned { background:#fbe3ef; border-color:#eba6c8; color:#85144b; }
.badge.compressed, .badge.compacted { background:#ece4fa; border-color:#c3aef0; color:#4a2a8a; }
.badge.superseded, .badge.bad { background:#fde4e2; border-color:#f2aaa4; color:var(--bad); }
.text { white-space:pre-wrap; word-break:break-word; margin:.35rem 0 0; }
.thinking { color:var(--muted); font-style:italic; }
.pair { border:1px dashed #a9c0ee; border-radius:6px; margin:.4rem 0; padding:.35rem .6rem;
  background:#f7f9fe; }
.pair .call, .pair .result { font-family:ui-monospace, monospace; font-size:12px;
  white-space:pre-wrap; word-break:break-word; }
.pair .result { border-top:1px solid #d8e2f7; margin-top:.3rem; padding-top:.3rem; }
.pair .result.error { color:var(--bad); }
.covers { margin:.3rem 0 0; font-size:12px; }
.pager { display:flex; gap:.6rem; align-items:center; margin:.6rem 0; }
.pager .off { color:#aab; }
form.inline { display:inline; }
textarea { width:100%; min-height:6rem; font:13px ui-monospace, monospace; }
input[type=text], input[type=search], input[type=password] { padding:.3rem .4rem;
  min-width:18rem; }
button { cursor:pointer; }
.notice { padding:.5rem .8rem; border-radius:6px; background:#fff6db; border:1px solid #f0d27a; }
.error { padding:.5rem .8rem; border-radius:6px; background:#fde4e2; border:1px solid #f2aaa4; }
.muted { color:var(--muted); }
.parts td.n { text-align:right; font-variant-numeric:tabular-nums; }
.ids { font-family:ui-monospace, monospace; font-size:11px; }
"""

JS = """
document.addEventListener('submit', function (ev) {
  var f = ev.target;
  if (f.dataset && f.dataset.confirm && !window.confirm(f.dataset.confirm)) ev.preventDefault();
});
document.addEventListener('keydown', function (ev) {
  if (ev.target.tagName === 'TEXTAREA' || ev.target.tagName === 'INPUT') return;
  var a = null;
  if (ev.key === 'ArrowLeft') a = document.querySelector('a[rel=prev]');
  if (ev.key === 'ArrowRight') a = document.querySelector('a[rel=next]');
  if (a) window.location = a.href;
});
(function () {  // live model calls: re-read #calls while the reply runs, no reload
  var box = document.getElementById('calls');
  if (!box || !box.dataset.live) return;
  var quiet = 0;
  function poll() {
    fetch(window.location.href, {credentials: 'same-origin', cache: 'no-store'})
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (text) {
        var next = new DOMParser().parseFromString(text, 'text/html').getElementById('calls');
        if (!next) return;
        quiet = next.innerHTML === box.innerHTML ? quiet + 1 : 0;
        box.innerHTML = next.innerHTML;
        if (!next.dataset.live) { delete box.dataset.live; return; }
        if (quiet < 300) { setTimeout(poll, 1000); return; }
        box.insertAdjacentHTML('afterbegin',
          '<p class="notice">No change for 5 minutes: stopped watching. Reload to look again.</p>');
      })
      .catch(function () { setTimeout(poll, 5000); });
  }
  setTimeout(poll, 1000);
})();
"""


def e(value: object) -> str:
    """HTML-escape any value (``None`` -> empty)."""
    return "" if value is None else html.escape(str(value), quote=True)


def url(root: str, path: str, **params: object) -> str:
    """A URL below the app's mount point with query parameters (``None`` ones left out)."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{root}{path}" + (f"?{query}" if query else "")


def badge(text: str, kind: str | None = None) -> str:
    cls = kind if kind is not None else text
    safe = "".join(c for c in cls if c.isalnum() or c in "_-")
    return f'<span class="badge {safe}">{e(text)}</span>'


def csrf_field(csrf: str) -> str:
    return f'<input type="hidden" name="csrf" value="{e(csrf)}">'


def layout(
    title: str,
    body: str,
    *,
    root: str,
    user: str | None,
    here: str = "",
    csrf: str = "",
    status_note: str = "",
) -> str:
    nav = ""
    if user is not None:
        links = [
            ("sessions", "/sessions", "Sessions"),
            ("memory", "/memory", "Long-term memory"),
            ("agentic", "/agentic", "Markdown memory"),
            ("audit", "/audit", "Audit log"),
        ]
        nav = "".join(
            f'<a href="{e(url(root, path))}" class="{"here" if key == here else ""}">{e(label)}</a>'
            for key, path, label in links
        )
        nav += (
            f'<span class="who">signed in as <b>{e(user)}</b></span>'
            f'<form method="post" action="{e(url(root, "/signout"))}">{csrf_field(csrf)}'
            '<button type="submit">Sign out</button></form>'
        )
    note = f'<p class="notice">{e(status_note)}</p>' if status_note else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · mnemoscope inspector</title><style>{CSS}</style></head>"
        f"<body><header><b>mnemoscope inspector</b>{nav}</header>"
        f"<main>{note}{body}</main><script>{JS}</script></body></html>"
    )
