"""The branch worker with credentials, signing and refusals: a real sshd with a declining hook,
a real bare remote, signatures checked by `git verify-commit` and `ssh-keygen -Y verify`."""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from kubescribe import metrics
from kubescribe.devenv.gitremote import BareRemote, git
from kubescribe.devenv.sshgit import SshGitServer, sshd_binary
from kubescribe.git.repo import GitRepository, MissingSigner, RemoteUnavailable
from kubescribe.git.signing import SigningKey
from kubescribe.git.targets import Committer, PlainRenderer, TargetConfig, WriteReport
from kubescribe.git.transport.callbacks import remote_callbacks
from kubescribe.git.transport.errors import GitFailure
from kubescribe.git.transport.secret import Credentials
from kubescribe.git.worker import BranchWorker
from kubescribe.mirror.changes import Change, Cursor, Operation, PruneMode, TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.layout import Layout
from tests.gitsig import allowed_signers, git_verify_commit, ssh_keygen_verify

CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
TARGET = TargetKey("team", "mirror")
COMMITTER = Committer("kubescribe", "kubescribe@example.invalid")
_versions = itertools.count(1)


def upsert(name: str, value: str = "1") -> Change:
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns1"},
        "data": {"k": value},
    }
    return Change(
        TARGET,
        Operation.CREATE,
        Identity("", "ConfigMap", "ns1", name),
        CONFIGMAPS,
        doc,
        time.monotonic(),
        Cursor("stream", str(next(_versions))),
    )


def path_of(name: str) -> str:
    return f"mirror/ns1/core/configmaps/{name}.yaml"


async def until(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class Harness:
    def __init__(self, url: str, cache: Path, callbacks: Callable[[], object] | None) -> None:
        self.reports: list[WriteReport] = []
        self.acked: list[Cursor] = []
        self.worker = BranchWorker(
            url,
            "main",
            cache_dir=cache,
            committer=COMMITTER,
            on_report=self.reports.append,
            on_pushed=self.acked.extend,
            callbacks=callbacks,  # type: ignore[arg-type]
        )
        self.worker.configure(
            [TargetConfig(TARGET, "mirror", Layout(), PruneMode.ALWAYS, PlainRenderer())]
        )

    def last(self) -> WriteReport | None:
        return self.reports[-1] if self.reports else None


@pytest.fixture
async def harnesses() -> AsyncIterator[list[Harness]]:
    started: list[Harness] = []
    yield started
    for h in started:
        await h.worker.stop(timeout=5)


async def test_every_worker_commit_is_signed_and_verifies(
    remote: BareRemote, tmp_path: Path, harnesses: list[Harness]
) -> None:
    key = SigningKey.generate()
    h = Harness(remote.url, tmp_path / "cache", None)
    h.worker.set_signer(key)
    h.worker.start()
    harnesses.append(h)
    seed = remote.tip()
    for name in ("a", "b", "c"):
        h.worker.submit(upsert(name))
    await until(lambda: path_of("c") in remote.files(), "three files")

    signers = allowed_signers(tmp_path / "allowed_signers", key.public_key_line)
    made = git("rev-list", f"{seed}..main", cwd=remote.path).split()
    assert len(made) == 3
    for sha in made:
        assert key.fingerprint in git_verify_commit(remote.path, sha, signers)
        assert "Good" in ssh_keygen_verify(remote.path, sha, signers, tmp_path / "sigs")


async def test_missing_signer_commits_nothing_and_says_why(
    remote: BareRemote, tmp_path: Path, harnesses: list[Harness]
) -> None:
    h = Harness(remote.url, tmp_path / "cache", None)
    h.worker.set_signer(MissingSigner("the signing key Secret 'sign' is missing"))
    h.worker.start()
    harnesses.append(h)
    before = remote.tip()
    h.worker.submit(upsert("a"))
    await until(lambda: h.last() is not None, "a report")
    report = h.last()
    assert report is not None
    assert (report.ok, report.reason) == (False, "SigningKeyMissing")
    assert "'sign' is missing" in report.message
    assert remote.tip() == before
    assert h.acked == []

    key = SigningKey.generate()
    h.worker.set_signer(key)
    h.worker.retry_now()
    await until(lambda: path_of("a") in remote.files(), "the file once the key is there")
    signers = allowed_signers(tmp_path / "allowed_signers", key.public_key_line)
    git_verify_commit(remote.path, "main", signers)


# --- SSH -----------------------------------------------------------------------------------


def _key() -> tuple[bytes, str]:
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public.decode()


@pytest.fixture(scope="module")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshGitServer]:
    if sshd_binary() is None:
        pytest.skip("sshd is not installed (Debian package openssh-server)")
    with SshGitServer(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def test_repository_without_callbacks_fails_closed_on_ssh(
    ssh_server: SshGitServer, tmp_path: Path
) -> None:
    _, public = _key()
    ssh_server.authorize(public)
    repo = ssh_server.create_repo("default-callbacks")
    with pytest.raises(RemoteUnavailable) as info:
        GitRepository(ssh_server.url_for(repo.path.name), tmp_path / "cache").fetch("main")
    assert info.value.reason == GitFailure.HOST_KEY_UNKNOWN
    assert "no known_hosts entry" in str(info.value)


async def test_declining_hook_is_permission_denied_and_not_rebuilt(
    ssh_server: SshGitServer, tmp_path: Path, harnesses: list[Harness]
) -> None:
    private, public = _key()
    ssh_server.authorize(public)
    repo = ssh_server.create_repo("protected")
    hook = repo.path / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'GL-HOOK-ERR: main is a protected branch' >&2\nexit 1\n")
    hook.chmod(0o755)
    url = ssh_server.url_for(repo.path.name)
    creds = Credentials.from_secret_data(
        {"ssh-privatekey": private}, known_hosts=ssh_server.host_key_line
    )
    rejected = metrics.PUSHES.labels("rejected")._value.get()
    h = Harness(url, tmp_path / "cache", functools.partial(remote_callbacks, creds, url))
    h.worker.start()
    harnesses.append(h)
    before = repo.tip()

    h.worker.submit(upsert("a"))
    await until(lambda: h.last() is not None, "a report")
    report = h.last()
    assert report is not None
    assert (report.ok, report.reason) == (False, "PermissionDenied")
    assert "hook declined" in report.message
    assert "protected branch" in report.message  # what the server said, passed on
    assert metrics.PUSHES.labels("rejected")._value.get() == rejected  # no rebuild loop
    assert repo.tip() == before
    assert h.acked == []

    hook.unlink()
    h.worker.retry_now()
    await until(lambda: len(h.acked) == 1, "the push once the hook is gone")
    assert path_of("a") in repo.files()
