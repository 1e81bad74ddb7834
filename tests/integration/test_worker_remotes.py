"""The branch worker with credentials, signing and refusals: a real sshd with a declining hook,
a real bare remote, signatures checked by `git verify-commit` and `ssh-keygen -Y verify`."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kubescribe import metrics
from kubescribe.git.repo import GitRepository, MissingSigner, RemoteUnavailable
from kubescribe.git.signing import SigningKey
from kubescribe.git.transport.callbacks import remote_callbacks
from kubescribe.git.transport.errors import GitFailure
from kubescribe.git.transport.secret import Credentials
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.sshgit import SshGitServer, sshd_binary
from tests.builders import path_of, target, upsert
from tests.gitsig import allowed_signers, git_verify_commit, ssh_keygen_verify
from tests.manifests import keypair
from tests.support import WorkerHarness, until


@pytest.fixture
async def harnesses() -> AsyncIterator[list[WorkerHarness]]:
    started: list[WorkerHarness] = []
    yield started
    for h in started:
        await h.worker.stop(timeout=5)


async def test_every_worker_commit_is_signed_and_verifies(
    remote: BareRemote, tmp_path: Path, harnesses: list[WorkerHarness]
) -> None:
    key = SigningKey.generate()
    h = WorkerHarness(remote.url, tmp_path / "cache", targets=[target()])
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
    remote: BareRemote, tmp_path: Path, harnesses: list[WorkerHarness]
) -> None:
    h = WorkerHarness(remote.url, tmp_path / "cache", targets=[target()])
    h.worker.set_signer(MissingSigner("the signing key Secret 'sign' is missing"))
    h.worker.start()
    harnesses.append(h)
    before = remote.tip()
    h.worker.submit(upsert("a"))
    await until(lambda: bool(h.reports), "a report")
    report = h.last()
    assert (report.ok, report.reason) == (False, "SigningKeyMissing")
    assert "'sign' is missing" in report.message
    assert remote.tip() == before
    assert h.acked == set()

    key = SigningKey.generate()
    h.worker.set_signer(key)
    h.worker.retry_now()
    await until(lambda: path_of("a") in remote.files(), "the file once the key is there")
    signers = allowed_signers(tmp_path / "allowed_signers", key.public_key_line)
    git_verify_commit(remote.path, "main", signers)


# --- SSH -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshGitServer]:
    if sshd_binary() is None:
        pytest.skip("sshd is not installed (Debian package openssh-server)")
    with SshGitServer(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def test_repository_without_callbacks_fails_closed_on_ssh(
    ssh_server: SshGitServer, tmp_path: Path
) -> None:
    _, public = keypair()
    ssh_server.authorize(public)
    repo = ssh_server.create_repo("default-callbacks")
    with pytest.raises(RemoteUnavailable) as info:
        GitRepository(ssh_server.url_for(repo.path.name), tmp_path / "cache").fetch("main")
    assert info.value.reason == GitFailure.HOST_KEY_UNKNOWN
    assert "no known_hosts entry" in str(info.value)


async def test_declining_hook_is_permission_denied_and_not_rebuilt(
    ssh_server: SshGitServer, tmp_path: Path, harnesses: list[WorkerHarness]
) -> None:
    private, public = keypair()
    ssh_server.authorize(public)
    repo = ssh_server.create_repo("protected")
    hook = repo.path / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'GL-HOOK-ERR: main is a protected branch' >&2\nexit 1\n")
    hook.chmod(0o755)
    url = ssh_server.url_for(repo.path.name)
    creds = Credentials.from_secret_data(
        {"ssh-privatekey": private.encode()}, known_hosts=ssh_server.host_key_line
    )
    rejected = metrics.PUSHES.labels("rejected")._value.get()
    h = WorkerHarness(
        url,
        tmp_path / "cache",
        targets=[target()],
        callbacks=functools.partial(remote_callbacks, creds, url),
    )
    h.worker.start()
    harnesses.append(h)
    before = repo.tip()

    h.worker.submit(upsert("a"))
    await until(lambda: bool(h.reports), "a report")
    report = h.last()
    assert (report.ok, report.reason) == (False, "PermissionDenied")
    assert "hook declined" in report.message
    assert "protected branch" in report.message  # what the server said, passed on
    assert metrics.PUSHES.labels("rejected")._value.get() == rejected  # no rebuild loop
    assert repo.tip() == before
    assert h.acked == set()

    hook.unlink()
    h.worker.retry_now()
    await until(lambda: len(h.acked) == 1, "the push once the hook is gone")
    assert path_of("a") in repo.files()
