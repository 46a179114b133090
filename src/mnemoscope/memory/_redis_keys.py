"""How :class:`~mnemoscope.memory.RedisMemory` spells a session's keys (no redis import).

A session's keys share the hash-tagged base ``{prefix}:{<user>:<session>}`` so that every key
of one session lands on one Redis Cluster slot. ``%``, ``:``, ``{`` and ``}`` in the ids are
percent-escaped, so no user or session id can reach into another's keys and ``:`` separates
the two ids unambiguously. Readers of the layout (the inspector) use these functions, never a
copy of the rule.
"""

from __future__ import annotations

import re

_UNESCAPES = {"25": "%", "3A": ":", "7B": "{", "7D": "}"}


def escape_key_part(part: str) -> str:
    """An id as it appears inside a key."""
    return part.replace("%", "%25").replace(":", "%3A").replace("{", "%7B").replace("}", "%7D")


def unescape_key_part(part: str) -> str:
    """The id :func:`escape_key_part` made ``part`` from."""
    return re.sub(r"%(25|3A|7B|7D)", lambda m: _UNESCAPES[m.group(1)], part)


def session_key_base(key_prefix: str, user_id: str, session_id: str) -> str:
    """``{prefix}:{<user>:<session>}``: the part every key of one session starts with."""
    return f"{key_prefix}:{{{escape_key_part(user_id)}:{escape_key_part(session_id)}}}"
