"""Which proxy a Git transfer goes through (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`), how a
failure through it is reported, and that proxy credentials never show."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from pygit2.enums import CredentialType

from kubescribe import cli
from kubescribe.git import worker
from kubescribe.git.repo import RemoteUnavailable
from kubescribe.git.transport.callbacks import remote_callbacks
from kubescribe.git.transport.errors import GitFailure, TransportRefused
from kubescribe.git.transport.proxy import (
    ProxyConfigError,
    ProxySettings,
    display,
    proxy_failure,
    redact,
)
from kubescribe.git.transport.secret import Credentials

PROXY = "http://proxy.corp.example:3128"


def _settings(no_proxy: str = "", **env: str) -> ProxySettings:
    return ProxySettings.from_environ(
        {"HTTPS_PROXY": PROXY, "HTTP_PROXY": "http://plain.corp.example:8080", **env}
        | ({"NO_PROXY": no_proxy} if no_proxy else {})
    )


def test_https_and_http_remotes_use_their_own_proxy() -> None:
    settings = _settings()
    assert settings.proxy_for("https://git.example.com/org/repo.git") == PROXY
    assert settings.proxy_for("http://git.example.com/org/repo.git") == (
        "http://plain.corp.example:8080"
    )


@pytest.mark.parametrize(
    "url",
    [
        "ssh://git@git.example.com/org/repo.git",
        "git@git.example.com:org/repo.git",
        "git+ssh://git.example.com/org/repo.git",
        "file:///srv/git/repo.git",
        "/srv/git/repo.git",
        "git://git.example.com/repo.git",
        "ext::ssh -p 22 example.com",
        "https://[not-v6]/repo.git",
    ],
)
def test_ssh_local_and_unparsable_remotes_are_never_proxied(url: str) -> None:
    assert _settings().proxy_for(url) is None


def test_lowercase_variables_win_over_uppercase() -> None:
    settings = ProxySettings.from_environ(
        {
            "https_proxy": "http://lower:1",
            "HTTPS_PROXY": "http://upper:2",
            "http_proxy": "",
            "HTTP_PROXY": "http://upper-http:3",
            "no_proxy": "lower.example",
            "NO_PROXY": "upper.example",
        }
    )
    assert settings.https == "http://lower:1"
    assert settings.http == "http://upper-http:3"  # an empty lowercase value does not count
    assert settings.proxy_for("https://lower.example/r.git") is None
    assert settings.proxy_for("https://upper.example/r.git") == "http://lower:1"


def test_no_variables_means_no_proxy() -> None:
    settings = ProxySettings.from_environ({})
    assert settings.proxy_for("https://git.example.com/r.git") is None
    assert settings.describe() == {}


def test_only_the_scheme_s_own_proxy_counts() -> None:
    settings = ProxySettings.from_environ({"HTTPS_PROXY": PROXY})
    assert settings.proxy_for("http://git.example.com/r.git") is None


@pytest.mark.parametrize(
    ("no_proxy", "url", "direct"),
    [
        ("*", "https://anything.example/r.git", True),
        ("example.com", "https://example.com/r.git", True),
        ("example.com", "https://git.example.com/r.git", True),
        ("example.com", "https://notexample.com/r.git", False),
        (".example.com", "https://git.example.com/r.git", True),
        (".example.com", "https://example.com/r.git", True),
        ("*.example.com", "https://deep.git.example.com/r.git", True),
        ("EXAMPLE.com.", "https://Git.Example.COM./r.git", True),
        ("svc,cluster.local", "https://gitea.git.svc/r.git", True),
        ("svc cluster.local", "https://gitea.git.svc.cluster.local/r.git", True),
        ("example.com:8443", "https://example.com:8443/r.git", True),
        ("example.com:8443", "https://example.com/r.git", False),
        ("example.com:443", "https://example.com/r.git", True),
        ("10.0.0.0/8", "https://10.96.0.12/r.git", True),
        ("10.0.0.0/8", "https://11.0.0.1/r.git", False),
        ("10.0.0.0/8", "https://ten.example/r.git", False),  # names are not resolved
        ("192.168.1.7", "https://192.168.1.7/r.git", True),
        ("192.168.1.7:8443", "https://192.168.1.7:8443/r.git", True),
        ("192.168.1.7:8443", "https://192.168.1.7/r.git", False),
        ("fd00::/8", "https://[fd00::1]/r.git", True),
        ("[::1]", "https://[::1]:8443/r.git", True),
        ("[::1]:8443", "https://[::1]:8443/r.git", True),
        ("[::1]:8443", "https://[::1]/r.git", False),
        ("::1", "https://[::1]/r.git", True),
        ("127.0.0.1", "https://localhost/r.git", False),
        (" , ,example.com, ", "https://example.com/r.git", True),
    ],
)
def test_no_proxy_entries(no_proxy: str, url: str, direct: bool) -> None:
    assert (_settings(no_proxy).proxy_for(url) is None) is direct


@pytest.mark.parametrize(
    "entry",
    ["10.0.0.0/33", "exa mple$.com", "[::1", "[::1]x", "host:99999", "a..b", "-bad.example"],
)
def test_an_unusable_no_proxy_entry_is_refused_by_name(entry: str) -> None:
    with pytest.raises(ProxyConfigError, match="NO_PROXY entry"):
        ProxySettings.from_environ({"NO_PROXY": f"ok.example,{entry}"})


def test_a_proxy_without_scheme_is_http() -> None:
    settings = ProxySettings.from_environ({"HTTPS_PROXY": "proxy.corp.example:3128"})
    assert settings.https == "http://proxy.corp.example:3128"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("socks5://user:hunter2@proxy:1080", "only http:// and https://"),
        ("http://proxy:notaport", "does not parse"),
        ("http://proxy:3128/path", "has no path"),
        ("http://", "names no host"),
        ("http://pro xy:3128", "whitespace"),
    ],
)
def test_an_unusable_proxy_is_refused_without_its_password(value: str, says: str) -> None:
    with pytest.raises(ProxyConfigError, match=says) as info:
        ProxySettings.from_environ({"https_proxy": value})
    assert "hunter2" not in str(info.value)
    assert "HTTPS_PROXY" in str(info.value)


def test_proxy_credentials_never_show() -> None:
    proxy = "http://alice:hunter2@proxy.corp.example:3128"
    settings = ProxySettings.from_environ({"HTTPS_PROXY": proxy, "NO_PROXY": "a,b"})
    assert settings.proxy_for("https://git.example.com/r.git") == proxy  # libgit2 gets them
    assert display(proxy) == "http://proxy.corp.example:3128"
    assert settings.describe() == {
        "https_proxy": "http://proxy.corp.example:3128",
        "no_proxy": "2 entries",
    }
    said = f"CONNECT via {proxy} failed; password hunter2 rejected"
    assert "hunter2" not in redact(said, proxy)
    assert "alice" not in redact(said, proxy)


def _never(host: str, port: int) -> bool:
    raise AssertionError("the proxy is not asked")


@pytest.mark.parametrize(
    ("message", "reason", "says"),
    [
        (
            "proxy authentication required but no callback set",
            GitFailure.AUTHENTICATION_FAILED,
            "wants credentials",
        ),
        ("proxy returned unexpected status: 407", GitFailure.TRANSFER_FAILED, "credentials"),
        ("proxy returned unexpected status: 403", GitFailure.PERMISSION_DENIED, "HTTP 403"),
        ("proxy returned unexpected status: 401", GitFailure.AUTHENTICATION_FAILED, "HTTP 401"),
    ],
)
def test_a_proxy_that_answers_with_an_error_is_proxy_refused(
    message: str, reason: GitFailure, says: str
) -> None:
    got, text = proxy_failure(reason, message, "http://u:hunter2@proxy:3128", reachable=_never)
    assert got is GitFailure.PROXY_REFUSED
    assert says in text
    assert "http://proxy:3128" in text
    assert "hunter2" not in text


def test_a_proxy_that_cannot_reach_the_remote_says_the_remote_is_unreachable() -> None:
    got, text = proxy_failure(
        GitFailure.TRANSFER_FAILED, "proxy returned unexpected status: 502", PROXY, reachable=_never
    )
    assert got is GitFailure.REMOTE_UNREACHABLE
    assert "could not reach the remote" in text


def test_a_proxy_that_does_not_answer_is_proxy_unreachable() -> None:
    asked: list[tuple[str, int]] = []

    def down(host: str, port: int) -> bool:
        asked.append((host, port))
        return False

    got, text = proxy_failure(
        GitFailure.REMOTE_UNREACHABLE, "failed to connect to proxy: Connection refused", PROXY,
        reachable=down,
    )  # fmt: skip
    assert (got, asked) == (GitFailure.PROXY_UNREACHABLE, [("proxy.corp.example", 3128)])
    assert text.startswith(f"the proxy {PROXY} does not answer")


def test_a_remote_unreachable_behind_a_live_proxy_stays_remote_unreachable() -> None:
    got, _ = proxy_failure(
        GitFailure.REMOTE_UNREACHABLE, "timed out", PROXY, reachable=lambda h, p: True
    )
    assert got is GitFailure.REMOTE_UNREACHABLE


def test_other_failures_and_direct_transfers_are_left_as_classified() -> None:
    assert proxy_failure(GitFailure.HOST_KEY_UNKNOWN, "x", PROXY, reachable=_never) == (
        GitFailure.HOST_KEY_UNKNOWN,
        "x",
    )
    assert proxy_failure(GitFailure.REMOTE_UNREACHABLE, "y", None, reachable=_never) == (
        GitFailure.REMOTE_UNREACHABLE,
        "y",
    )


def test_credentials_are_not_sent_in_clear_text_through_a_proxy() -> None:
    creds = Credentials.from_secret_data({"username": b"bob", "password": b"hunter2"})
    callbacks = remote_callbacks(creds, "http://git.example.com/r.git")
    callbacks.proxied = True
    with pytest.raises(TransportRefused, match="not sent in clear text") as info:
        callbacks.credentials(
            "http://git.example.com/r.git", None, CredentialType.USERPASS_PLAINTEXT
        )
    assert info.value.reason is GitFailure.AUTHENTICATION_FAILED
    # Over https the tunnel is TLS end to end: the server gets them.
    tls = remote_callbacks(creds, "https://git.example.com/r.git")
    tls.proxied = True
    answer = tls.credentials(
        "https://git.example.com/r.git", None, CredentialType.USERPASS_PLAINTEXT
    )
    assert answer.credential_tuple == ("bob", "hunter2")


def test_kubescribe_run_refuses_an_unusable_proxy_at_start() -> None:
    result = CliRunner().invoke(
        cli.main, ["run"], env={"HTTPS_PROXY": "socks5://alice:hunter2@proxy:1080"}
    )
    assert result.exit_code == 2
    assert "HTTPS_PROXY" in result.output
    assert "only http:// and https://" in result.output
    assert "hunter2" not in result.output


def test_a_proxy_that_does_not_answer_is_retried_as_soon_as_an_unreachable_remote() -> None:
    unreachable = worker._retry_cap(RemoteUnavailable("x"))
    assert worker._retry_cap(RemoteUnavailable("x", "ProxyUnreachable")) == unreachable
    assert worker._retry_cap(RemoteUnavailable("x", "ProxyRefused")) > unreachable


@given(st.text(max_size=80), st.text(max_size=80), st.text(max_size=80))
def test_any_environment_is_read_or_refused_with_proxy_config_error(
    https: str, no_proxy: str, url: str
) -> None:
    try:
        settings = ProxySettings.from_environ({"HTTPS_PROXY": https, "NO_PROXY": no_proxy})
    except ProxyConfigError:
        return
    chosen = settings.proxy_for(url)
    assert chosen is None or chosen == settings.https
