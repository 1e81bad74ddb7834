"""Kubeconfig reading: tokens, token files, TLS choices, and the exec-plugin hand-off."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from kubescribe.kube.config import ConfigError, from_kubeconfig, via_kubernetes_asyncio


def write(
    tmp_path: Path, user: dict[str, object], cluster: dict[str, object] | None = None
) -> Path:
    doc = {
        "clusters": [
            {"name": "c", "cluster": {"server": "https://example.invalid:6443/", **(cluster or {})}}
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(doc))
    return path


def test_token_and_insecure(tmp_path: Path) -> None:
    conn = from_kubeconfig(write(tmp_path, {"token": "abc"}, {"insecure-skip-tls-verify": True}))
    assert conn is not None
    assert conn.host == "https://example.invalid:6443"
    assert conn.ssl is False
    assert conn.authorization() == "Bearer abc"


def test_token_file_is_reread(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("first\n")
    conn = from_kubeconfig(
        write(tmp_path, {"tokenFile": "token"}, {"insecure-skip-tls-verify": True})
    )
    assert conn is not None
    assert conn.authorization() == "Bearer first"
    (tmp_path / "token").write_text("rotated\n")
    assert conn.authorization() == "Bearer rotated"


def test_exec_plugins_are_handed_to_kubernetes_asyncio(tmp_path: Path) -> None:
    assert from_kubeconfig(write(tmp_path, {"exec": {"command": "get-token"}})) is None


def test_unknown_context_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no context named 'other'"):
        from_kubeconfig(write(tmp_path, {"token": "x"}), context="other")


def test_exec_plugins_without_kubernetes_asyncio_are_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The image carries no kubernetes_asyncio (the extra kubeconfig-plugins): an exec plugin
    # kubeconfig is refused with what to install, not an ImportError.
    monkeypatch.setitem(sys.modules, "kubernetes_asyncio", None)
    path = write(tmp_path, {"exec": {"command": "get-token"}})
    with pytest.raises(ConfigError, match=r"kubescribe\[kubeconfig-plugins\]"):
        asyncio.run(via_kubernetes_asyncio(path, None))
