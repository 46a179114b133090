"""Hardening of the permission engine (issue 10, items 3, 4 and 21).

* relative rule patterns mean below the cwd and each working directory;
* a cwd that is ``/``, the home directory or a parent of it is not an implicit root;
* well-known secret locations are refused in every mode unless an allow rule names them;
* ``call_roots`` gives the backend exactly what an allow rule grants.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mnemoscope.permission import (
    SECRET_LOCATIONS,
    AdditionalWorkingDirectory,
    PermissionContext,
    PermissionMode,
    PermissionRule,
)


def _read(perm: PermissionContext, path: str, tool: str = "Read"):
    return perm.decide(tool, is_read_only=True, paths=[(path, "read")])


def _write(perm: PermissionContext, path: str, tool: str = "Write"):
    return perm.decide(tool, is_read_only=False, paths=[(path, "write")])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake home directory with the usual secrets, as ``$HOME``."""
    home = tmp_path / "users" / "alice"
    for rel in (
        ".ssh/id_rsa",
        ".ssh/known_hosts",
        ".aws/credentials",
        ".config/gcloud/credentials.db",
        ".gnupg/secring.gpg",
        ".netrc",
        ".docker/config.json",
        ".kube/config",
        "notes.md",
    ):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("secret\n")
    monkeypatch.setenv("HOME", str(home))
    return home


# ------------------------------------------------------------ item 4: implicit roots
@pytest.mark.parametrize("mode", [PermissionMode.DEFAULT, PermissionMode.ACCEPT_EDITS])
def test_cwd_root_is_not_an_implicit_working_directory(
    monkeypatch: pytest.MonkeyPatch, home: Path, mode: PermissionMode
) -> None:
    monkeypatch.chdir("/")
    perm = PermissionContext(mode=mode)  # default cwd: the process's, here "/"
    assert perm.cwd == "/" and perm.roots() == []
    d = _read(perm, "/etc/passwd")
    assert d.behavior == "deny" and d.reason == "outside_working_dirs"
    assert "file system root" in d.message and "working_directories" in d.message
    assert _write(perm, "/etc/cron.d/evil").behavior == "deny"
    assert _read(perm, "etc/hostname").behavior == "deny"  # relative to "/" too


@pytest.mark.parametrize("where", ["home", "parent", "grandparent"])
def test_cwd_home_or_a_parent_of_it_is_not_an_implicit_working_directory(
    monkeypatch: pytest.MonkeyPatch, home: Path, where: str
) -> None:
    cwd = {"home": home, "parent": home.parent, "grandparent": home.parent.parent}[where]
    monkeypatch.chdir(cwd)
    perm = PermissionContext(mode=PermissionMode.ACCEPT_EDITS)
    assert perm.roots() == []
    for path in (str(home / "notes.md"), "~/.ssh/id_rsa", str(home / ".bashrc")):
        assert _read(perm, path).behavior == "deny", path
        assert _write(perm, path).behavior == "deny", path
    assert "home directory" in _read(perm, str(home / "notes.md")).message


def test_a_project_below_home_is_still_the_implicit_working_directory(
    monkeypatch: pytest.MonkeyPatch, home: Path
) -> None:
    project = home / "src" / "project"
    project.mkdir(parents=True)
    monkeypatch.chdir(project)
    perm = PermissionContext(mode=PermissionMode.ACCEPT_EDITS)
    assert perm.roots() == [project.resolve()]
    assert _write(perm, "a.md").behavior == "allow"


def test_home_as_an_explicit_working_directory_still_refuses_its_secrets(home: Path) -> None:
    perm = PermissionContext(mode=PermissionMode.ACCEPT_EDITS, cwd=str(home))
    perm.working_directories[str(home)] = AdditionalWorkingDirectory(path=str(home))
    assert _read(perm, str(home / "notes.md")).behavior == "allow"
    assert _write(perm, "notes.md").behavior == "allow"
    for rel in (
        ".ssh/id_rsa",
        ".ssh",
        ".aws/credentials",
        ".config/gcloud/credentials.db",
        ".gnupg/secring.gpg",
        ".netrc",
        ".docker/config.json",
        ".kube/config",
    ):
        for path in (str(home / rel), f"~/{rel}", rel):
            d = _read(perm, path)
            assert d.behavior == "deny" and d.reason == "secret", path
            assert _write(perm, path).behavior == "deny", path
    assert "secret location" in _read(perm, "~/.ssh/id_rsa").message


@pytest.mark.parametrize("mode", list(PermissionMode))
def test_secret_locations_are_refused_in_every_mode_bypass_included(
    home: Path, tmp_path: Path, mode: PermissionMode
) -> None:
    perm = PermissionContext(mode=mode, cwd=str(tmp_path))
    perm.working_directories["/"] = AdditionalWorkingDirectory(path="/")
    perm.allow_rules = [PermissionRule(tool="*"), PermissionRule(path="/**")]
    for path in (
        "~/.ssh/id_rsa",
        "~/.aws/credentials",
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/sudoers",
        "/etc/sudoers.d/90-cloud",
        "/proc/self/environ",
        "/proc/1/environ",
        "/proc/thread-self/environ",
        "/root/.ssh/authorized_keys",
        str(home / ".SSH" / "id_rsa"),  # case-insensitively too
    ):
        d = _read(perm, path)
        assert d.behavior == "deny" and d.reason == "secret", (mode, path)
        assert _write(perm, path).behavior == "deny", (mode, path)
    assert _read(perm, "/etc/hostname").behavior != "deny" or mode == PermissionMode.PLAN


def test_a_symlink_to_a_secret_is_refused(home: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "keys").symlink_to(home / ".ssh")
    (work / "env").symlink_to("/proc/self/environ")
    perm = PermissionContext(mode=PermissionMode.BYPASS, cwd=str(work))
    for path in ("keys/id_rsa", str(work / "keys"), "env"):
        d = _read(perm, path)
        assert d.behavior == "deny" and d.reason == "secret", path


def test_only_an_allow_rule_naming_a_secret_location_unlocks_it(home: Path) -> None:
    perm = PermissionContext(mode=PermissionMode.ACCEPT_EDITS, cwd=str(home))
    perm.working_directories[str(home)] = AdditionalWorkingDirectory(path=str(home))
    for broad in ("~/**", "/**", "~/.*/**", "**", "**/id_rsa", f"{home}/*/id_rsa"):
        perm.allow_rules = [PermissionRule(tool="Read", path=broad)]
        assert _read(perm, "~/.ssh/id_rsa").behavior == "deny", broad
    perm.allow_rules = [PermissionRule(tool="Read", path="~/.ssh/known_hosts")]
    assert _read(perm, "~/.ssh/known_hosts").behavior == "allow"
    assert _read(perm, "~/.ssh/id_rsa").behavior == "deny"  # not named
    assert _read(perm, "~/.ssh/known_hosts", tool="Grep").behavior == "deny"  # other tool
    assert _write(perm, "~/.ssh/known_hosts").behavior == "deny"  # Write is not named
    perm.allow_rules = [PermissionRule(tool="*", path="~/.aws/**")]
    assert _read(perm, "~/.aws/credentials").behavior == "allow"
    assert _read(perm, "~/.ssh/known_hosts").behavior == "deny"
    perm.allow_rules = [PermissionRule(tool="Read", path="/proc/*/environ")]
    assert _read(perm, "/proc/self/environ").behavior == "allow"
    # deny rules still win over a naming allow rule
    perm.deny_rules = [PermissionRule(path="/proc/**")]
    assert _read(perm, "/proc/self/environ").reason == "rule"


def test_secret_locations_can_be_extended(tmp_path: Path) -> None:
    vault = tmp_path / "work" / "vault"
    vault.mkdir(parents=True)
    perm = PermissionContext(mode=PermissionMode.BYPASS, cwd=str(tmp_path / "work"))
    perm.secret_locations = [*SECRET_LOCATIONS, str(vault)]
    assert _read(perm, "vault/token").reason == "secret"
    assert _read(perm, "other/token").behavior == "allow"


# --------------------------------------------------- item 3: relative rule patterns
def test_relative_deny_patterns_mean_below_cwd_and_every_working_directory(
    tmp_path: Path,
) -> None:
    cwd, extra = tmp_path / "cwd", tmp_path / "extra"
    perm = PermissionContext(
        mode=PermissionMode.ACCEPT_EDITS,
        cwd=str(cwd),
        deny_rules=[PermissionRule(path="secrets/**"), PermissionRule(path="**/.env")],
    )
    perm.working_directories["x"] = AdditionalWorkingDirectory(path=str(extra))
    for path in (
        "secrets/key",
        "secrets",
        str(cwd / "secrets" / "deep" / "key"),
        str(extra / "secrets" / "key"),
        str(cwd / "SECRETS" / "key"),
        ".env",
        "sub/dir/.env",
        str(extra / ".env"),
    ):
        d = _read(perm, path)
        assert d.behavior == "deny" and d.reason == "rule", path
    for path in ("notes/secrets.md", "a/secrets/key"):  # not directly below a root
        assert _read(perm, path).behavior == "allow", path
    # relative to the working directories, not to wherever the process runs
    assert _read(perm, str(tmp_path / "secrets" / "key")).reason == "outside_working_dirs"


def test_relative_allow_patterns_grant_only_below_the_working_directories(
    tmp_path: Path,
) -> None:
    cwd, other = tmp_path / "cwd", tmp_path / "other"
    perm = PermissionContext(
        cwd=str(cwd), allow_rules=[PermissionRule(tool="Read", path="**/*.md")]
    )
    assert _read(perm, str(cwd / "a" / "b.md")).behavior == "allow"
    # before: "**/*.md" granted every .md file of the machine
    d = _read(perm, str(other / "b.md"))
    assert d.behavior == "deny" and d.reason == "outside_working_dirs"


# ----------------------------------------------------------- item 21: call_roots
def test_call_roots_add_exactly_what_the_allow_rule_grants(tmp_path: Path) -> None:
    work, granted, sibling = tmp_path / "work", tmp_path / "x", tmp_path / "y"
    for d in (work, granted / "sub", sibling):
        d.mkdir(parents=True)
    perm = PermissionContext(
        mode=PermissionMode.ACCEPT_EDITS,
        cwd=str(work),
        allow_rules=[
            PermissionRule(tool="*", path=f"{granted}/**"),
            PermissionRule(tool="Read", path=f"{sibling}/*.md"),
        ],
        deny_rules=[PermissionRule(path=f"{granted}/private/**")],
    )
    assert perm.call_roots("Read", [(str(work / "a"), "read")]) == [work]
    assert perm.call_roots("Write", [(str(granted / "sub" / "a.md"), "write")]) == [work, granted]
    assert perm.call_roots("Glob", [(str(granted), "read")]) == [work, granted]
    # a file pattern grants the file's directory, for that tool only
    assert perm.call_roots("Read", [(str(sibling / "a.md"), "read")]) == [work, sibling]
    assert perm.call_roots("Write", [(str(sibling / "a.md"), "write")]) == [work]
    # nothing for a path no rule grants, a denied one, or a secret one
    assert perm.call_roots("Read", [(str(tmp_path / "z" / "a"), "read")]) == [work]
    assert perm.call_roots("Read", [(str(granted / "private" / "k"), "read")]) == [work]
    assert perm.call_roots("Read", [("/etc/shadow", "read")]) == [work]
    # the decision agrees
    assert _write(perm, str(granted / "sub" / "a.md")).behavior == "allow"
    assert _read(perm, str(tmp_path / "a")).behavior == "deny"
    perm.mode = PermissionMode.BYPASS
    assert perm.call_roots("Read", [(str(granted / "a"), "read")]) is None


def test_call_roots_follow_the_resolved_path_not_the_link(tmp_path: Path) -> None:
    work, granted, sibling = tmp_path / "work", tmp_path / "x", tmp_path / "y"
    for d in (work, granted, sibling):
        d.mkdir()
    (granted / "link").symlink_to(sibling / "f")
    perm = PermissionContext(
        cwd=str(work), allow_rules=[PermissionRule(tool="Read", path=f"{granted}/**")]
    )
    assert perm.call_roots("Read", [(str(granted / "link"), "read")]) == [work]
    assert _read(perm, str(granted / "link")).behavior == "deny"
    assert os.path.realpath(granted / "link") == str(sibling / "f")
