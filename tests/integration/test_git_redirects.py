"""HTTPS redirects to another host: the credential (bearer header or basic auth) never goes
there. Two real TLS servers on loopback: the configured one answers every request with a
redirect, the other records what it receives."""

from __future__ import annotations

import functools
import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubescribe.git.probe import probe_remote
from kubescribe.git.repo import GitRepository, RemoteUnavailable
from kubescribe.git.transport.callbacks import remote_callbacks
from kubescribe.git.transport.secret import Credentials
from kubescribe_devenv.pki import CertificateAuthority

TOKEN = "redirect-canary-token-0123456789"
PASSWORD = "redirect-canary-password"


class _Server(http.server.ThreadingHTTPServer):
    """An HTTPS server on 127.0.0.1 that records every request's path and Authorization."""

    def __init__(self, tls: ssl.SSLContext, location: str | None) -> None:
        self.location = location  # redirect there, or answer 401 (basic) when None
        self.seen: list[tuple[str, str | None]] = []
        super().__init__(("127.0.0.1", 0), _Handler)
        self.socket = tls.wrap_socket(self.socket, server_side=True)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        if self.server.location is not None:
            self.send_response(302)
            self.send_header("Location", self.server.location + self.path)
        else:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="elsewhere"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


def _tls(ca: CertificateAuthority, host: str, workdir: Path) -> ssl.SSLContext:
    pair = ca.issue(host, hosts=(host,))
    cert, key = workdir / f"{host}.crt", workdir / f"{host}.key"
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


@functools.cache
def _ca() -> CertificateAuthority:
    return CertificateAuthority()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[_Server, _Server]]:
    """(configured, elsewhere): 127.0.0.1 redirects to `localhost`, another host name (and
    port) with a certificate from the same CA, so TLS alone would not stop the request."""
    elsewhere = _Server(_tls(_ca(), "localhost", tmp_path), None)
    configured = _Server(_tls(_ca(), "127.0.0.1", tmp_path), f"https://localhost:{elsewhere.port}")
    threads = [
        threading.Thread(target=s.serve_forever, daemon=True) for s in (configured, elsewhere)
    ]
    for thread in threads:
        thread.start()
    yield configured, elsewhere
    for server in (configured, elsewhere):
        server.shutdown()
        server.server_close()


CREDENTIALS = {
    "bearer": {"bearerToken": TOKEN},
    "basic": {"username": "writer", "password": PASSWORD},
    "token": {"token": TOKEN},
}


@pytest.mark.parametrize("kind", sorted(CREDENTIALS))
def test_a_redirect_to_another_host_is_refused_before_the_credential_goes_there(
    servers: tuple[_Server, _Server], tmp_path: Path, kind: str
) -> None:
    configured, elsewhere = servers
    data = {k: v.encode() for k, v in CREDENTIALS[kind].items()} | {"ca.crt": _ca().cert_pem}
    creds = Credentials.from_secret_data(data)
    url = f"https://127.0.0.1:{configured.port}/team/repo.git"
    repo = GitRepository(url, tmp_path / "cache", lambda: remote_callbacks(creds, url))
    with pytest.raises(RemoteUnavailable) as failed:
        repo.fetch("main")
    probe = probe_remote(url, creds, tmp_path / "scratch", resolve=False)

    assert configured.seen, "the configured server was never asked"
    assert elsewhere.seen == []  # no request at all, so no credential
    assert failed.value.reason == "RedirectRefused"
    assert "localhost" in str(failed.value)
    assert (probe.read.status, probe.read.reason) == ("False", "RedirectRefused")
    for text in (str(failed.value), probe.read.message):
        assert TOKEN not in text
        assert PASSWORD not in text
