"""Git over HTTPS through a real proxy (Debian tinyproxy on loopback) in front of the real
HTTPS git server: `HTTPS_PROXY` is honoured by fetch, push, the default-branch lookup and the
provider probe; `NO_PROXY` bypasses it; SSH is never proxied; a proxy that does not answer or
refuses has its own status reason; basic auth to the proxy comes from the proxy URL, and the
proxy never sees the Secret's credentials (a tunnelling proxy in the test keeps every request
head it was sent)."""

from __future__ import annotations

import base64
import contextlib
import functools
import itertools
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from kubescribe.git.probe import probe_remote
from kubescribe.git.repo import GitRepository, RemoteUnavailable
from kubescribe.git.transport.callbacks import remote_callbacks
from kubescribe.git.transport.proxy import ProxySettings
from kubescribe.git.transport.secret import Credentials
from kubescribe_devenv.controlplane import free_port
from kubescribe_devenv.gitremote import BareRemote
from kubescribe_devenv.httpgit import HttpsGitServer, missing_binaries
from kubescribe_devenv.proxy import TinyProxy, tinyproxy_binary
from kubescribe_devenv.sshgit import SshGitServer, sshd_binary

PASSWORD = "proxy-test-password-0123456789"
TOKEN = "proxy-test-bearer-token-0123456789abcdef"
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


def _require(missing: list[str]) -> None:
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsGitServer]:
    _require(missing_binaries())
    with HttpsGitServer(tmp_path_factory.mktemp("https")) as server:
        server.add_user("writer", PASSWORD)
        server.add_bearer_token(TOKEN, "robot")
        yield server


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyProxy]:
    _require([] if tinyproxy_binary() else ["tinyproxy"])
    with TinyProxy(tmp_path_factory.mktemp("tinyproxy")) as server:
        yield server


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def repo(https_server: HttpsGitServer, request: pytest.FixtureRequest) -> BareRemote:
    return https_server.create_repo(request.node.name.replace("[", "-").strip("]"))


def _creds(server: HttpsGitServer, **data: str) -> Credentials:
    return Credentials.from_secret_data(
        {"ca.crt": server.ca_pem, **{k: v.encode() for k, v in data.items()}}
    )


def _cache(url: str, creds: Credentials, where: Path) -> GitRepository:
    return GitRepository(url, where, functools.partial(remote_callbacks, creds, url))


def _commit_and_push(cache: GitRepository, remote: BareRemote, name: str) -> None:
    base = cache.fetch("main")
    assert str(base) == remote.tip()
    assert base is not None
    sig = pygit2.Signature("k", "k@example.invalid")
    tree = cache.repo[base].peel(pygit2.Tree)
    builder = cache.repo.TreeBuilder(tree)
    builder.insert(name, cache.repo.create_blob(name.encode()), pygit2.enums.FileMode.BLOB)
    ours = cache.repo.create_commit(None, sig, sig, name, builder.write(), [base])
    cache.push("main", ours, base)
    assert remote.tip() == str(ours)
    assert name in remote.files()


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy"])
def test_fetch_push_and_default_branch_go_through_https_proxy(
    https_server: HttpsGitServer,
    proxy: TinyProxy,
    repo: BareRemote,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
) -> None:
    monkeypatch.setenv(variable, proxy.url)
    url = https_server.url_for(repo.path.name)
    creds = _creds(https_server, username="writer", password=PASSWORD)
    target = f"127.0.0.1:{https_server.port}"
    tunnels: list[int] = []

    def fresh() -> GitRepository:
        """A new connection for every step (one keeps its tunnel open between requests)."""
        tunnels.append(proxy.connects().count(target))
        return _cache(url, creds, tmp_path)

    assert fresh().default_branch() == "main"
    base = fresh().fetch("main")
    assert base is not None
    assert str(base) == repo.tip()
    cache = fresh()
    sig = pygit2.Signature("k", "k@example.invalid")
    builder = cache.repo.TreeBuilder(cache.repo[base].peel(pygit2.Tree))
    builder.insert("proxied.txt", cache.repo.create_blob(b"x"), pygit2.enums.FileMode.BLOB)
    ours = cache.repo.create_commit(None, sig, sig, "proxied", builder.write(), [base])
    cache.push("main", ours, base)
    tunnels.append(proxy.connects().count(target))
    assert repo.tip() == str(ours)
    # The HEAD lookup, the fetch and the push each opened a tunnel with CONNECT.
    steps = [after - before for before, after in itertools.pairwise(tunnels)]
    assert steps == [1, 1, 1]


def test_no_proxy_bypasses_the_proxy(
    https_server: HttpsGitServer,
    proxy: TinyProxy,
    repo: BareRemote,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "example.com,127.0.0.0/8")
    before = len(proxy.requests())
    url = https_server.url_for(repo.path.name)
    cache = _cache(url, _creds(https_server, username="writer", password=PASSWORD), tmp_path)
    _commit_and_push(cache, repo, "direct.txt")
    assert len(proxy.requests()) == before


def test_the_provider_probe_goes_through_the_proxy(
    https_server: HttpsGitServer, proxy: TinyProxy, repo: BareRemote, tmp_path: Path
) -> None:
    url = https_server.url_for(repo.path.name)
    target = f"127.0.0.1:{https_server.port}"
    before = proxy.connects().count(target)
    result = probe_remote(
        url,
        _creds(https_server, username="writer", password=PASSWORD),
        tmp_path,
        proxies=ProxySettings.from_environ({"HTTPS_PROXY": proxy.url}),
    )
    assert (result.read.status, result.write.status) == ("True", "True")
    assert proxy.connects().count(target) - before == 2  # the read and the push probe


def test_a_proxy_that_does_not_answer_is_proxy_unreachable(
    https_server: HttpsGitServer, repo: BareRemote, tmp_path: Path
) -> None:
    dead = f"http://nobody:hunter2-proxy@127.0.0.1:{free_port()}"
    settings = ProxySettings.from_environ({"HTTPS_PROXY": dead})
    url = https_server.url_for(repo.path.name)
    creds = _creds(https_server, username="writer", password=PASSWORD)
    cache = GitRepository(
        url, tmp_path / "cache", functools.partial(remote_callbacks, creds, url), lambda: settings
    )
    with pytest.raises(RemoteUnavailable) as failed:
        cache.fetch("main")
    assert failed.value.reason == "ProxyUnreachable"
    assert "does not answer" in str(failed.value)
    result = probe_remote(url, creds, tmp_path / "probe", proxies=settings)
    assert (result.read.status, result.read.reason) == ("False", "ProxyUnreachable")
    for message in (str(failed.value), result.read.message):
        assert "hunter2-proxy" not in message
        assert "nobody" not in message


def test_a_proxy_that_refuses_is_proxy_refused(
    https_server: HttpsGitServer, repo: BareRemote, tmp_path: Path
) -> None:
    _require([] if tinyproxy_binary() else ["tinyproxy"])
    url = https_server.url_for(repo.path.name)
    creds = _creds(https_server, username="writer", password=PASSWORD)
    # CONNECT only to port 443: the server's port is refused (403).
    with TinyProxy(tmp_path / "strict", connect_ports=(443,)) as strict:
        settings = ProxySettings.from_environ({"HTTPS_PROXY": strict.url})
        cache = GitRepository(
            url,
            tmp_path / "cache",
            functools.partial(remote_callbacks, creds, url),
            lambda: settings,
        )
        with pytest.raises(RemoteUnavailable) as failed:
            cache.fetch("main")
        assert strict.connects() == [f"127.0.0.1:{https_server.port}"]
    assert failed.value.reason == "ProxyRefused"
    assert "HTTP 403" in str(failed.value)


class _TunnelProxy:
    """A CONNECT proxy that wants basic auth `pu`/`pp` (407 until it gets it, on the same
    connection), keeps every request head it was sent, and then tunnels the bytes."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.heads: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo}127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        wanted = "basic " + base64.b64encode(b"pu:pp").decode().lower()
        with conn:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    data += chunk
                raw, data = data.split(b"\r\n\r\n", 1)
                head = raw.decode(errors="replace")
                self.heads.append(head)
                fields = [line.split(":", 1) for line in head.split("\r\n")[1:]]
                auth = [v.strip().lower() for k, v in fields if k.lower() == "proxy-authorization"]
                if auth == [wanted]:
                    break
                conn.sendall(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                    b'Proxy-Authenticate: Basic realm="test"\r\nContent-Length: 0\r\n\r\n'
                )
            host, port = head.split()[1].rsplit(":", 1)
            with socket.create_connection((host, int(port))) as upstream:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                upstream.sendall(data)
                threading.Thread(target=_pump, args=(upstream, conn), daemon=True).start()
                _pump(conn, upstream)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def tunnel() -> Iterator[_TunnelProxy]:
    proxy = _TunnelProxy()
    yield proxy
    proxy.close()


@pytest.mark.parametrize(
    "data",
    [{"username": "writer", "password": PASSWORD}, {"bearerToken": TOKEN}],
    ids=["basic", "bearer"],
)
def test_proxy_credentials_reach_the_proxy_and_the_secret_s_never_do(
    https_server: HttpsGitServer,
    repo: BareRemote,
    tunnel: _TunnelProxy,
    tmp_path: Path,
    data: dict[str, str],
) -> None:
    url = https_server.url_for(repo.path.name)
    settings = ProxySettings.from_environ({"HTTPS_PROXY": tunnel.url("pu:pp@")})
    creds = _creds(https_server, **data)
    cache = GitRepository(
        url, tmp_path, functools.partial(remote_callbacks, creds, url), lambda: settings
    )
    _commit_and_push(cache, repo, "authenticated-proxy.txt")
    assert tunnel.heads
    assert all(
        h.startswith(f"CONNECT 127.0.0.1:{https_server.port} HTTP/1.1") for h in tunnel.heads
    )
    seen = "\n".join(tunnel.heads).lower()
    assert "proxy-authorization: basic" in seen
    assert "\nauthorization" not in seen
    for value in (PASSWORD, TOKEN, "writer"):
        assert value.lower() not in seen


@pytest.mark.parametrize("userinfo", ["", "pu:wrong-proxy-password@"], ids=["none", "wrong"])
def test_missing_or_wrong_proxy_credentials_are_proxy_refused_without_the_password(
    https_server: HttpsGitServer,
    repo: BareRemote,
    tunnel: _TunnelProxy,
    tmp_path: Path,
    userinfo: str,
) -> None:
    url = https_server.url_for(repo.path.name)
    creds = _creds(https_server, username="writer", password=PASSWORD)
    settings = ProxySettings.from_environ({"HTTPS_PROXY": tunnel.url(userinfo)})
    cache = GitRepository(
        url, tmp_path, functools.partial(remote_callbacks, creds, url), lambda: settings
    )
    with pytest.raises(RemoteUnavailable) as failed:
        cache.fetch("main")
    assert failed.value.reason == "ProxyRefused"
    assert "wants credentials" in str(failed.value)
    result = probe_remote(url, creds, tmp_path / "probe", proxies=settings)
    assert (result.read.status, result.read.reason) == ("False", "ProxyRefused")
    for message in (str(failed.value), result.read.message):
        assert "wrong-proxy-password" not in message
    assert PASSWORD.lower() not in "\n".join(tunnel.heads).lower()


def test_ssh_remotes_are_not_proxied_and_still_work(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _require([] if sshd_binary() else ["sshd"])
    # A proxy that does not exist: an SSH transfer that tried it would fail.
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    key = ed25519.Ed25519PrivateKey.generate()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    with SshGitServer(tmp_path_factory.mktemp("sshd")) as ssh:
        ssh.authorize(public)
        remote = ssh.create_repo("over-ssh")
        creds = Credentials.from_secret_data(
            {"ssh-privatekey": private}, known_hosts=ssh.host_key_line
        )
        url = ssh.url_for("over-ssh")
        _commit_and_push(_cache(url, creds, tmp_path), remote, "ssh-direct.txt")
