"""The command line's conventions: every bad invocation is one line on stderr that says what is
wrong and how to fix it, exit code 2 for usage errors and 1 for errors at run time, never a
traceback unless `--debug`; `--version`; shell completion. Each case runs the installed
`kubescribe` script in a fresh process, as a user would."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kubescribe import __version__

SCRIPT = shutil.which("kubescribe", path=str(Path(sys.executable).parent))


def kubescribe(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    assert SCRIPT is not None, "the kubescribe script is not installed next to python"
    return subprocess.run(
        [SCRIPT, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """An environment with an empty home, no KUBECONFIG and no in-cluster variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}
    }
    env["HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir()
    return env


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there now: connections are refused


def kubeconfig(path: Path, server: str, user: dict[str, object] | None = None) -> Path:
    path.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": user or {"token": "t"}}],
                "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "here",
            }
        )
    )
    return path


def assert_one_line(done: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    lines = done.stderr.splitlines()
    assert done.returncode == code, done.stderr
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert lines[0].startswith("kubescribe: ")
    for word in words:
        assert word in lines[0]
    assert done.stdout == ""
    return lines[0]


USAGE = [
    (["run", "--log-level", "bogus"], ["--log-level", "'bogus' is not one of", "run --help"]),
    (["run", "--metrics-addr", "nonsense"], ["--metrics-addr", "HOST:PORT"]),
    (["run", "--metrics-addr", "127.0.0.1:99999"], ["--metrics-addr", "HOST:PORT"]),
    (["run", "--audit-addr", "[::1:443"], ["--audit-addr", "HOST:PORT"]),
    (["run", "--kubeconfig", "/nonexistent/kubeconfig"], ["--kubeconfig", "does not exist"]),
    (["run", "--probe-interval", "0"], ["--probe-interval", "0"]),
    (["run", "--no-such-flag"], ["No such option", "--no-such-flag"]),
    (["bogus"], ["No such command 'bogus'", "kubescribe --help"]),
    (["snapshot"], ["Missing option '--repo'", "snapshot --help"]),
    (["snapshot", "--repo", "r", "--content", "Partial"], ["--content", "'Partial'"]),
    (["--log-level", "info", "run"], ["No such option", "--log-level"]),
    (["run", "--cache-quota-per-namespace", "lots"], ["--cache-quota-per-namespace"]),
    (["run", "--webhook-cert-secret", "s"], ["--webhook-cert-secret needs --webhook-cert-host"]),
    (["run", "--audit-addr", ":8443"], ["--audit-addr needs --audit-tls-cert"]),
    (
        ["snapshot", "--repo", "r", "--age-recipient", "age1nope"],
        ["--age-recipient", "not an age X25519 public key"],
    ),
]


@pytest.mark.parametrize(("args", "words"), USAGE, ids=" ".join)
def test_usage_errors_are_one_line_with_exit_code_2(
    args: list[str], words: list[str], home: dict[str, str], tmp_path: Path
) -> None:
    assert_one_line(kubescribe(*args, env=home, cwd=tmp_path), 2, *words)


def test_no_kubeconfig_and_not_in_a_cluster(home: dict[str, str], tmp_path: Path) -> None:
    done = kubescribe("run", env=home, cwd=tmp_path)
    assert_one_line(done, 1, "no kubeconfig found", "~/.kube/config", "--kubeconfig")


def test_an_unknown_context_names_the_known_ones(home: dict[str, str], tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{closed_port()}")
    done = kubescribe("run", "--kubeconfig", str(config), "--context", "there", env=home)
    assert_one_line(done, 1, "context 'there'", "one of: here")


def test_an_unreachable_api_server(home: dict[str, str], tmp_path: Path) -> None:
    port = closed_port()
    config = kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}")
    for command in (["run"], ["snapshot", "--repo", str(tmp_path / "repo")]):
        done = kubescribe(*command, "--kubeconfig", str(config), env=home)
        assert_one_line(done, 1, f"cannot reach the API server at 127.0.0.1:{port}", "--context")


def test_a_broken_file_in_kubeconfig(home: dict[str, str], tmp_path: Path) -> None:
    good = kubeconfig(tmp_path / "good", "https://127.0.0.1:1")
    (tmp_path / "broken").write_text("clusters: [\n")
    env = {**home, "KUBECONFIG": f"{good}{os.pathsep}{tmp_path / 'broken'}"}
    done = kubescribe("run", env=env)
    assert_one_line(done, 1, str(tmp_path / "broken"), "not valid YAML")


def test_a_missing_exec_plugin(home: dict[str, str], tmp_path: Path) -> None:
    exec_user: dict[str, object] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "kubescribe-test-no-such-plugin",
            "installHint": "See the cloud's docs to install it.",
        }
    }
    config = kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{closed_port()}", exec_user)
    done = kubescribe("snapshot", "--kubeconfig", str(config), "--repo", "r", env=home)
    assert_one_line(done, 1, "kubescribe-test-no-such-plugin", "not found", "See the cloud's")


def test_debug_shows_the_traceback(home: dict[str, str], tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{closed_port()}")
    done = kubescribe("--debug", "run", "--kubeconfig", str(config), env=home)
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("kubescribe: cannot reach the API server")


def test_version(home: dict[str, str]) -> None:
    for args in (["--version"], ["version"]):
        done = kubescribe(*args, env=home)
        assert (done.returncode, done.stdout, done.stderr) == (0, f"kubescribe {__version__}\n", "")


def test_shell_completion(home: dict[str, str]) -> None:
    script = kubescribe(env={**home, "_KUBESCRIBE_COMPLETE": "bash_source"})
    assert script.returncode == 0
    assert "_KUBESCRIBE_COMPLETE=bash_complete" in script.stdout
    words = {**home, "_KUBESCRIBE_COMPLETE": "bash_complete", "COMP_CWORD": "1"}
    done = kubescribe(env={**words, "COMP_WORDS": "kubescribe sn"})
    assert done.stdout.split() == ["plain,snapshot"]
    done = kubescribe(env={**words, "COMP_WORDS": "kubescribe run --log-l", "COMP_CWORD": "2"})
    assert "plain,--log-level" in done.stdout.split()
