"""The URL policy at transfer time: a branch worker pushing to a real HTTPS remote (nginx +
git http-backend) re-checks the address its host resolves to before every push, so a name
re-pointed after it was accepted (DNS rebinding) is refused with UrlRefused, and
`--deny-private-networks` refuses a private address at the next push."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubescribe.git.transport.callbacks import remote_callbacks
from kubescribe.git.transport.secret import Credentials
from kubescribe.net.addresses import NetworkPolicy, set_network_policy
from kubescribe_devenv.httpgit import HttpsGitServer, missing_binaries
from tests.builders import path_of, target, upsert
from tests.support import WorkerHarness, until

PASSWORD = "url-policy-password"


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsGitServer]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (Debian packages nginx, fcgiwrap)")
    with HttpsGitServer(tmp_path_factory.mktemp("https")) as server:
        server.add_user("writer", PASSWORD)
        yield server


@pytest.fixture
async def started(
    https_server: HttpsGitServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[WorkerHarness, Any]]:
    """A worker that has pushed once to `https://<host>:<port>/…` (host from the test's
    `host` parameter), and the remote."""
    remote = https_server.create_repo(request.node.name.replace("[", "-").strip("]"))
    url = https_server.url_for(remote.path.name).replace("127.0.0.1", request.param)
    creds = Credentials.from_secret_data(
        {"ca.crt": https_server.ca_pem, "username": b"writer", "password": PASSWORD.encode()}
    )
    h = WorkerHarness(
        url, tmp_path / "cache", targets=[target()], callbacks=lambda: remote_callbacks(creds, url)
    )
    h.worker.start()
    h.worker.submit(upsert("a"))
    await until(lambda: path_of("a") in remote.files(), "the first push")
    yield h, remote
    await h.worker.stop(timeout=5)
    set_network_policy(NetworkPolicy())


async def _refused_at_push(h: WorkerHarness, remote: Any) -> None:
    tip = remote.tip()
    h.worker.submit(upsert("b"))
    await until(lambda: bool(h.reports) and not h.last().ok, "a failed write")
    report = h.last()
    assert report.reason == "UrlRefused"
    assert report.message.startswith("push refused:")
    assert remote.tip() == tip
    assert path_of("b") not in remote.files()


@pytest.mark.parametrize("started", ["localhost"], indirect=True)
async def test_a_name_rebound_to_the_metadata_address_is_refused_at_push_time(
    started: tuple[WorkerHarness, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """libgit2 still reaches nginx (it resolves on its own); the operator's resolver, asked
    before the push, now answers the metadata address, as a rebinding DNS server would."""
    h, remote = started
    real = socket.getaddrinfo

    def rebound(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "localhost":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebound)
    await _refused_at_push(h, remote)
    assert "cloud metadata endpoint" in h.last().message


@pytest.mark.parametrize("started", ["127.0.0.1"], indirect=True)
async def test_deny_private_networks_refuses_a_loopback_remote_at_push_time(
    started: tuple[WorkerHarness, Any],
) -> None:
    h, remote = started
    set_network_policy(NetworkPolicy(deny_private=True))
    await _refused_at_push(h, remote)
    assert "--deny-private-networks" in h.last().message
