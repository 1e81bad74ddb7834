"""What the HTTPS fetch path (libgit2 smart HTTP, protocol v0) negotiates with a real smart-HTTP
server (nginx + `git http-backend`): the capabilities advertised and the ones the writer's fetch
asks for, recorded from the wire. A server that offers `multi_ack` but not `multi_ack_detailed`,
and refuses any request without `multi_ack` (as Azure DevOps does), is fetched from and pushed to,
with a negotiation of several rounds."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from kubescribe.git.repo import GitRepository, RemoteError
from kubescribe.git.transport.callbacks import remote_callbacks
from kubescribe.git.transport.secret import Credentials
from kubescribe_devenv.gitremote import BareRemote
from kubescribe_devenv.httpgit import HttpsGitServer, missing_binaries

PASSWORD = "negotiation-password"
SIG = pygit2.Signature("k", "k@example.invalid")


def pkt_lines(data: bytes) -> Iterator[bytes]:
    """The pkt-lines of a protocol v0 message ('' for a flush), up to the first that is not one."""
    i = 0
    while i + 4 <= len(data):
        try:
            n = int(data[i : i + 4], 16)
        except ValueError:
            return
        yield data[i + 4 : i + n] if n else b""
        i += n or 4


def advertised(server: HttpsGitServer) -> set[str]:
    """The capabilities of the last upload-pack advertisement (after the server's filter)."""
    for line in pkt_lines(server.upload_pack_files("advertisement")[-1]):
        if b"\0" in line:
            return set(line.split(b"\0", 1)[1].decode().split())
    raise AssertionError("no capabilities advertised")


def asked(request: bytes) -> set[str]:
    """The capabilities a fetch request names on its first want line."""
    want = next(line for line in pkt_lines(request) if line.startswith(b"want "))
    return set(want.decode().split()[2:])


def haves(request: bytes) -> int:
    return sum(1 for line in pkt_lines(request) if line.startswith(b"have "))


def acks(response: bytes) -> list[str]:
    """The ACK lines of an upload-pack response (CGI headers first), before its pack."""
    response = response.partition(b"\r\n\r\n")[2]
    return [line.decode().strip() for line in pkt_lines(response) if line.startswith(b"ACK ")]


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[HttpsGitServer]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (Debian packages nginx, fcgiwrap)")
    options: dict[str, tuple[str, ...]] = getattr(request, "param", {})
    with HttpsGitServer(
        tmp_path / "https",
        trace_upload_pack=True,
        drop_capabilities=options.get("drop", ()),
        require_capabilities=options.get("require", ()),
    ) as running:
        running.add_user("writer", PASSWORD)
        yield running


def negotiate(server: HttpsGitServer, tmp_path: Path) -> tuple[GitRepository, BareRemote]:
    """The writer's fetch twice: a first fetch, then one after the remote moved while the cache
    holds 60 commits the remote lacks (several rounds of `have` lines); then a push."""
    remote = server.create_repo("r")
    url = server.url_for("r")
    creds = Credentials.from_secret_data(
        {"ca.crt": server.ca_pem, "username": b"writer", "password": PASSWORD.encode()}
    )
    repo = GitRepository(url, tmp_path / "cache", functools.partial(remote_callbacks, creds, url))
    base = repo.fetch("main")
    assert str(base) == remote.tip()
    assert base is not None
    tree = repo.repo[base].peel(pygit2.Tree).id
    local = base
    for i in range(60):  # work of its own the remote never saw
        local = repo.repo.create_commit(None, SIG, SIG, f"local {i}", tree, [local])
    repo.repo.references.create("refs/heads/local-work", local)
    foreign = remote.commit_foreign("foreign.txt", "x\n", "foreign")
    assert str(repo.fetch("main")) == foreign == remote.tip()
    ours = repo.repo.create_commit(None, SIG, SIG, "ours", tree, [pygit2.Oid(hex=foreign)])
    repo.push("main", ours, pygit2.Oid(hex=foreign))
    assert remote.tip() == str(ours)
    return repo, remote


def test_the_fetch_asks_for_multi_ack_detailed_where_it_is_offered(
    server: HttpsGitServer, tmp_path: Path
) -> None:
    negotiate(server, tmp_path)
    offered = advertised(server)
    assert {"multi_ack", "multi_ack_detailed"} <= offered
    requests = server.upload_pack_files("request")
    assert all("multi_ack_detailed" in asked(r) for r in requests)
    assert not any("multi_ack" in asked(r) for r in requests)  # one of the two, never both
    assert not any("no-done" in asked(r) for r in requests)  # offered, not asked for
    assert any(haves(r) for r in requests)  # the second fetch negotiated


@pytest.mark.parametrize(
    "server",
    [{"drop": ("multi_ack_detailed",), "require": ("multi_ack",)}],
    indirect=True,
)
def test_a_server_that_offers_and_requires_only_multi_ack_is_fetched_from(
    server: HttpsGitServer, tmp_path: Path
) -> None:
    negotiate(server, tmp_path)
    offered = advertised(server)
    assert "multi_ack" in offered
    assert "multi_ack_detailed" not in offered
    requests = server.upload_pack_files("request")
    assert requests
    assert all("multi_ack" in asked(r) for r in requests)
    assert not any("multi_ack_detailed" in asked(r) for r in requests)
    # The fetch after the remote moved took several rounds: each stateless request repeats the
    # wants and adds haves, and the server answered with multi_ack's `ACK <oid> continue`.
    negotiating = [r for r in requests if haves(r)]
    assert len(negotiating) >= 2
    responses = server.upload_pack_files("response")
    assert any(a.endswith(" continue") for r in responses for a in acks(r))
    assert not any(a.endswith((" common", " ready")) for r in responses for a in acks(r))


@pytest.mark.parametrize("server", [{"require": ("no-such-capability",)}], indirect=True)
def test_the_servers_requirement_is_real_a_request_without_it_fails(
    server: HttpsGitServer, tmp_path: Path
) -> None:
    """The check the multi_ack test passes refuses what it should: without the capability the
    server answers 400 and the fetch fails."""
    server.create_repo("r")
    url = server.url_for("r")
    creds = Credentials.from_secret_data(
        {"ca.crt": server.ca_pem, "username": b"writer", "password": PASSWORD.encode()}
    )
    repo = GitRepository(url, tmp_path / "cache", functools.partial(remote_callbacks, creds, url))
    with pytest.raises(RemoteError) as failed:
        repo.fetch("main")
    assert "400" in str(failed.value)
    assert server.upload_pack_files("request")
    assert not server.upload_pack_files("response")
