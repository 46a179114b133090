"""The package's public names, its extra's error message, token files."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from mnemoscope.errors import MissingExtraError, UserError
from mnemoscope.service import StaticTokens, TokenFile, parse_tokens


def test_every_public_name_imports() -> None:
    module = importlib.import_module("mnemoscope.service")
    names = list(module.__all__)
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    for name in names:
        assert getattr(module, name) is not None, name


def test_missing_fastapi_names_the_service_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fastapi", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "mnemoscope.service._app", raising=False)
    with pytest.raises(MissingExtraError, match=r"pip install 'mnemoscope\[service\]'"):
        importlib.import_module("mnemoscope.service._app")
    monkeypatch.delitem(sys.modules, "mnemoscope.service._app", raising=False)


def test_token_file_formats(tmp_path: Path) -> None:
    lines = tmp_path / "t.txt"
    lines.write_text("# comment\n\nalpha-token-1 alice   # trailing comment\nbeta-token-22 bob\n")
    tokens = TokenFile(lines)
    assert len(tokens) == 2
    assert tokens("alpha-token-1") == "alice" and tokens("beta-token-22") == "bob"
    assert tokens("alpha-token-") is None and tokens("") is None
    as_json = tmp_path / "t.json"
    as_json.write_text('{"gamma-token-3": "carol@example.com"}')
    assert TokenFile(as_json)("gamma-token-3") == "carol@example.com"


@pytest.mark.parametrize(
    "text, message",
    [
        ("tok-tok-tok alice extra\n", "line 1: expected 'token user_id'"),
        ("tok-tok-tok alice\ntok-tok-tok bob\n", "line 2: the token is listed twice"),
        ("short alice\n", "8 characters or more"),
        ("tok-tok-tok ali:ce\n", "must be 1-128 characters"),
        ('{"tok-tok-tok": 5}', 'expected {"token": "user_id", ...}'),
        ("{not json", "invalid JSON"),
        ("# only comments\n", "no tokens"),
    ],
)
def test_bad_token_files_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(UserError, match=message.replace("{", r"\{").replace("(", r"\(")):
        TokenFile(path)


def test_missing_token_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot be read"):
        TokenFile(tmp_path / "nope")


def test_static_tokens_and_parse() -> None:
    assert parse_tokens("a-long-token b\n", "x") == {"a-long-token": "b"}
    assert StaticTokens({"a-long-token": "b"})("a-long-token") == "b"
