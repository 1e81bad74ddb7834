"""Kubeconfig reading as kubectl does it: which files, how they merge, which context, and the
credentials (tokens, token files re-read, exec plugins run again before expiry)."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from kubescribe.kube import config as kube_config
from kubescribe.kube.config import (
    ConfigError,
    from_kubeconfig,
    kubeconfig_files,
    load_kubeconfig,
    resolve,
)
from kubescribe.kube.credentials import ExecPlugin, TokenFile
from kubescribe_devenv.pki import CertificateAuthority


def kubeconfig(
    clusters: dict[str, dict[str, Any]],
    users: dict[str, dict[str, Any]],
    contexts: dict[str, tuple[str, str]],
    current: str | None = None,
) -> str:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [
            {"name": n, "context": {"cluster": c, "user": u}} for n, (c, u) in contexts.items()
        ],
    }
    if current is not None:
        doc["current-context"] = current
    return json.dumps(doc)


def write(
    tmp_path: Path, user: dict[str, object], cluster: dict[str, object] | None = None
) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        kubeconfig(
            {"c": {"server": "https://example.invalid:6443/", **(cluster or {})}},
            {"u": user},
            {"ctx": ("c", "u")},
            "ctx",
        )
    )
    return path


INSECURE: dict[str, object] = {"insecure-skip-tls-verify": True}


async def test_token_and_insecure(tmp_path: Path) -> None:
    conn = from_kubeconfig(write(tmp_path, {"token": "abc"}, INSECURE))
    assert conn.host == "https://example.invalid:6443"
    assert conn.ssl is False
    assert await conn.authorization() == "Bearer abc"


async def test_token_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("first\n")
    conn = from_kubeconfig(write(tmp_path, {"tokenFile": "token"}, INSECURE))
    assert await conn.authorization() == "Bearer first"
    (tmp_path / "token").write_text("rotated!\n")
    assert await conn.authorization() == "Bearer rotated!"


async def test_token_file_is_read_again_every_minute(tmp_path: Path) -> None:
    """Even when the file's inode, mtime and size look unchanged (client-go: once a minute)."""
    path = tmp_path / "token"
    path.write_text("aaaa")
    now = [1000.0]
    source = TokenFile(path, clock=lambda: now[0])
    assert await source.header() == "Bearer aaaa"
    st = path.stat()
    path.write_text("bbbb")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime
    now[0] += 59
    assert await source.header() == "Bearer aaaa"
    now[0] += 1
    assert await source.header() == "Bearer bbbb"


async def test_a_401_makes_the_token_file_read_again(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("aaaa")
    source = TokenFile(path, clock=lambda: 0.0)
    assert await source.header() == "Bearer aaaa"
    st = path.stat()
    path.write_text("bbbb")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert source.rejected("Bearer aaaa")
    assert await source.header() == "Bearer bbbb"


def test_unknown_context_names_the_ones_there_are(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"context 'other' is not in .*one of: ctx"):
        from_kubeconfig(write(tmp_path, {"token": "x"}), context="other")


# --- which files: kubectl's order ------------------------------------------------------


def test_the_flag_wins_over_the_environment(tmp_path: Path) -> None:
    flag = write(tmp_path, {"token": "x"})
    files, origin = kubeconfig_files(str(flag), {"KUBECONFIG": "/elsewhere", "HOME": "/h"})
    assert (files, origin) == ([flag], "--kubeconfig")


def test_a_missing_flag_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        kubeconfig_files(str(tmp_path / "nope"), {})


def test_kubeconfig_is_a_list_without_empty_or_repeated_entries(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    files, _ = kubeconfig_files(None, {"KUBECONFIG": f"{a}::{b}:{a}:", "HOME": "/h"})
    assert files == [Path(a), Path(b)]


def test_home_kube_config_is_the_default(tmp_path: Path) -> None:
    files, origin = kubeconfig_files(None, {"HOME": str(tmp_path)})
    assert files == [tmp_path / ".kube" / "config"]
    assert origin == "~/.kube/config"
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text(
        kubeconfig(
            {"c": {"server": "https://home.invalid"}}, {"u": {"token": "t"}}, {"x": ("c", "u")}, "x"
        )
    )
    assert resolve(None, None, {"HOME": str(tmp_path)}).host == "https://home.invalid"


def test_merge_first_file_to_set_a_value_wins(tmp_path: Path) -> None:
    """kubectl's rules: current-context from the first file that sets one; a cluster, user or
    context of a name from the first file that has it, whole (never merged field by field);
    missing files skipped; relative paths relative to their own file."""
    one, two = tmp_path / "one", tmp_path / "two"
    (tmp_path / "sub").mkdir()
    one.write_text(
        kubeconfig(
            {"shared": {"server": "https://one.invalid"}},
            {"red": {"token": "from-one"}},
            {"a": ("shared", "red")},
        )  # no current-context
    )
    (tmp_path / "sub" / "token").write_text("file-two")
    two = tmp_path / "sub" / "two"
    two.write_text(
        kubeconfig(
            {
                "shared": {"server": "https://two.invalid", "insecure-skip-tls-verify": True},
                "other": {"server": "https://other.invalid"},
            },
            {"red": {"token": "from-two", "username": "x"}, "blue": {"tokenFile": "token"}},
            {"a": ("other", "blue"), "b": ("other", "blue")},
            "b",
        )
    )
    three = tmp_path / "three"
    three.write_text(kubeconfig({}, {}, {}, "a"))
    env = {
        "KUBECONFIG": os.pathsep.join([str(one), str(tmp_path / "missing"), str(two), str(three)])
    }
    merged = load_kubeconfig(None, env)
    assert merged.files == [one, two, three]
    assert merged.current_context == "b"  # the first file that sets one: two
    assert merged.contexts["a"].body == {"cluster": "shared", "user": "red"}  # one's
    assert merged.clusters["shared"].body == {"server": "https://one.invalid"}  # whole
    assert merged.users["red"].body == {"token": "from-one"}
    assert merged.clusters["other"].file == two


async def test_merged_context_uses_each_file_own_folder(tmp_path: Path) -> None:
    one = tmp_path / "one"
    one.write_text(kubeconfig({}, {}, {}, "b"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "token").write_text("file-two")
    two = tmp_path / "sub" / "two"
    two.write_text(
        kubeconfig(
            {"other": {"server": "https://other.invalid", **INSECURE}},
            {"blue": {"tokenFile": "token"}},
            {"b": ("other", "blue")},
            "ignored",
        )
    )
    conn = resolve(None, None, {"KUBECONFIG": f"{one}{os.pathsep}{two}"})
    assert conn.host == "https://other.invalid"
    assert await conn.authorization() == "Bearer file-two"
    with pytest.raises(ConfigError, match="'ignored' is not in"):
        resolve(None, "ignored", {"KUBECONFIG": f"{one}{os.pathsep}{two}"})


def test_nothing_found_and_not_in_a_cluster(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no kubeconfig found .*pass --kubeconfig"):
        resolve(None, None, {"HOME": str(tmp_path)})


def test_in_cluster_when_no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_bytes(CertificateAuthority("test-ca").cert_pem)
    monkeypatch.setattr(kube_config, "SERVICE_ACCOUNT", account)
    env = {
        "HOME": str(tmp_path),
        "KUBERNETES_SERVICE_HOST": "fd00::1",
        "KUBERNETES_SERVICE_PORT": "443",
    }
    conn = resolve(None, None, env)
    assert conn.host == "https://[fd00::1]:443"
    assert isinstance(conn.credentials, TokenFile)
    assert conn.credentials.path == account / "token"
    # A kubeconfig, when there is one, wins over the Pod's account, as in kubectl.
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text(
        kubeconfig({"c": {"server": "https://k.invalid"}}, {"u": {}}, {"x": ("c", "u")}, "x")
    )
    assert resolve(None, None, env).host == "https://k.invalid"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not yaml", "not valid YAML"),
        ("- a list", "not a kubeconfig"),
        ('{"clusters": [{"cluster": {}}]}', "has no name"),
    ],
)
def test_broken_files_are_named(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "broken"
    path.write_text(text)
    with pytest.raises(ConfigError, match=words) as caught:
        load_kubeconfig(None, {"KUBECONFIG": str(path)})
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("cluster", "user", "words"),
    [
        ({}, {"token": "x"}, "has no server"),
        ({"server": "https://a.invalid", "certificate-authority": "nope.crt"}, {}, "nope.crt"),
        ({"server": "https://a.invalid", "certificate-authority-data": "!!"}, {}, "not base64"),
        ({"server": "ftp://a.invalid"}, {}, "not an http"),
    ],
)
def test_unusable_entries_are_named(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], words: str
) -> None:
    path = tmp_path / "kc"
    path.write_text(kubeconfig({"c": cluster}, {"u": user}, {"x": ("c", "u")}, "x"))
    with pytest.raises(ConfigError, match=words):
        from_kubeconfig(path)


# --- exec plugins ------------------------------------------------------------------------

PLUGIN = """import json, os, sys
state = json.load(open(sys.argv[1]))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False
state["runs"] += 1
state["env"] = os.environ.get("PLUGIN_ENV")
json.dump(state, open(sys.argv[1], "w"))
if state.get("fail"):
    print("token service down", file=sys.stderr)
    sys.exit(3)
status = {"token": state["token"]}
if state.get("expiry"):
    status["expirationTimestamp"] = state["expiry"]
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": status}))
"""


def plugin(tmp_path: Path, **state: Any) -> tuple[Path, dict[str, Any]]:
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN)
    (tmp_path / "state.json").write_text(json.dumps({"runs": 0, **state}))
    spec = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(script), str(tmp_path / "state.json")],
        "env": [{"name": "PLUGIN_ENV", "value": "set"}],
        "installHint": "install the test plugin",
    }
    return tmp_path / "state.json", spec


def update(state: Path, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(state.read_text())
    doc.update(changes)
    state.write_text(json.dumps(doc))
    return doc


def iso(when: float) -> str:
    return dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_exec_plugin_runs_again_before_its_token_expires(tmp_path: Path) -> None:
    start = 1_900_000_000.0
    state, spec = plugin(tmp_path, token="one", expiry=iso(start + 1000))
    now = [start]
    cred = ExecPlugin(spec, tmp_path, clock=lambda: now[0])
    assert await cred.header() == "Bearer one"
    assert await cred.header() == "Bearer one"
    assert json.loads(state.read_text())["runs"] == 1
    assert json.loads(state.read_text())["env"] == "set"
    update(state, token="two", expiry=iso(start + 2000))
    now[0] = start + 899  # under nine tenths of its life: still the first token
    assert await cred.header() == "Bearer one"
    now[0] = start + 900  # nine tenths: the next one, 100 s before the first expires
    assert await cred.header() == "Bearer two"
    assert json.loads(state.read_text())["runs"] == 2


async def test_exec_plugin_without_expiry_runs_again_after_a_401(tmp_path: Path) -> None:
    state, spec = plugin(tmp_path, token="one")
    cred = ExecPlugin(spec, tmp_path)
    assert await cred.header() == "Bearer one"
    update(state, token="two")
    assert await cred.header() == "Bearer one"
    assert cred.rejected("Bearer one")
    assert await cred.header() == "Bearer two"


async def test_exec_plugin_via_the_kubeconfig(tmp_path: Path) -> None:
    _, spec = plugin(tmp_path, token="from-plugin")
    conn = from_kubeconfig(write(tmp_path, {"exec": spec}, INSECURE))
    assert await conn.authorization() == "Bearer from-plugin"


async def test_exec_plugin_failures_are_one_clear_line(tmp_path: Path) -> None:
    state, spec = plugin(tmp_path, token="x", fail=True)
    with pytest.raises(ConfigError, match=r"exited with 3: token service down"):
        await from_kubeconfig(write(tmp_path, {"exec": spec}, INSECURE)).authorization()
    missing = {**spec, "command": "kubescribe-no-such-plugin"}
    with pytest.raises(ConfigError, match=r"not found.*\(install the test plugin\)"):
        await from_kubeconfig(write(tmp_path, {"exec": missing}, INSECURE)).authorization()
    update(state, fail=False, expiry="yesterday")
    with pytest.raises(ConfigError, match="not an RFC 3339 time"):
        await from_kubeconfig(write(tmp_path, {"exec": spec}, INSECURE)).authorization()


async def test_an_auth_provider_without_kubernetes_asyncio_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The image carries no kubernetes_asyncio (the extra kubeconfig-plugins): an auth-provider
    # kubeconfig is refused with what to install, not an ImportError.
    monkeypatch.setitem(sys.modules, "kubernetes_asyncio", None)
    path = write(tmp_path, {"auth-provider": {"name": "oidc", "config": {}}}, INSECURE)
    merged = load_kubeconfig(str(path), {})
    with pytest.raises(ConfigError, match=r"install kubescribe\[kubeconfig-plugins\]"):
        await kube_config.via_kubernetes_asyncio(merged, None)
