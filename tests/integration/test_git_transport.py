"""Fetch and push over real SSH (OpenSSH sshd) and HTTPS (nginx + git http-backend) servers,
with credentials read from Secret data: host keys and TLS fail closed, refusals are classified."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from kubescribe.git.repo import GitRepository, PushRejected
from kubescribe.git.transport.callbacks import remote_callbacks
from kubescribe.git.transport.errors import GitFailure, classify_git_error
from kubescribe.git.transport.known_hosts import write_host_key_preferences
from kubescribe.git.transport.secret import Credentials
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.httpgit import HttpsGitServer, missing_binaries
from kubescribe_devenv.pki import CertificateAuthority
from kubescribe_devenv.sshgit import SshGitServer, sshd_binary

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _key(kind: str = "ed25519") -> PrivateKey:
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def _private(key: PrivateKey, passphrase: bytes | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase)
        if passphrase
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, encryption
    )


def _public(key: PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


def _clone(url: str, creds: Credentials, dest: Path) -> pygit2.Repository:
    return pygit2.clone_repository(url, str(dest), callbacks=remote_callbacks(creds, url))


def _commit(repo: pygit2.Repository, message: str) -> pygit2.Oid:
    """Add one file on top of `main` (locally) and return the new commit."""
    sig = pygit2.Signature("kubescribe", "kubescribe@example.invalid")
    parent = repo.references["refs/heads/main"].peel(pygit2.Commit)
    builder = repo.TreeBuilder(parent.tree)
    builder.insert(
        f"{message}.yaml", repo.create_blob(message.encode()), pygit2.enums.FileMode.BLOB
    )
    return repo.create_commit("refs/heads/main", sig, sig, message, builder.write(), [parent.id])


def _push(repo: pygit2.Repository, url: str, creds: Credentials) -> None:
    refused: list[str] = []
    callbacks = remote_callbacks(creds, url)
    callbacks.push_update_reference = lambda refname, message: (  # type: ignore[method-assign]
        refused.append(message) if message else None
    )
    repo.remotes.create_anonymous(url).push(
        ["refs/heads/main:refs/heads/main"], callbacks=callbacks
    )
    assert not refused


def _failure(action: object, creds: Credentials) -> tuple[GitFailure, str]:
    with pytest.raises(pygit2.GitError) as info:
        action()  # type: ignore[operator]
    return classify_git_error(info.value, creds)


# --- SSH ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshGitServer]:
    if sshd_binary() is None:
        pytest.skip("sshd is not installed (Debian package openssh-server)")
    with SshGitServer(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture(scope="module")
def deploy_key(ssh_server: SshGitServer) -> PrivateKey:
    key = _key()
    ssh_server.authorize(_public(key))
    return key


@pytest.fixture
def ssh_repo(ssh_server: SshGitServer, request: pytest.FixtureRequest) -> BareRemote:
    return ssh_server.create_repo(request.node.name.replace("[", "-").strip("]"))


def _ssh_creds(key: PrivateKey, known_hosts: str | None) -> Credentials:
    data = {"ssh-privatekey": _private(key)}
    if known_hosts is not None:
        data["known_hosts"] = known_hosts.encode()
    return Credentials.from_secret_data(data)


def _accepted_logins(server: SshGitServer) -> int:
    return server.log_path.read_text().count("Accepted publickey")


def _ssh_keygen(path: Path, kind: str, passphrase: str, pem: bool) -> tuple[bytes, str]:
    """A key made by OpenSSH itself: (private key file, public key line)."""
    args = ["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-a", "2", "-C", "t", "-f", str(path)]
    subprocess.run([*args, *(["-m", "PEM"] if pem else [])], check=True, capture_output=True)
    return path.read_bytes(), path.with_suffix(".pub").read_text()


@pytest.mark.parametrize(
    ("key_name", "kind", "pem", "passphrase_key"),
    [
        ("ssh-privatekey", "ed25519", False, None),
        ("ssh-privatekey", "rsa", True, None),
        ("identity", "rsa", False, "password"),
        ("sshPrivateKey", "ecdsa", False, "passphrase"),
        ("identity", "ed25519", False, "ssh-passphrase"),
    ],
)
def test_ssh_clone_and_push_with_secret_key_and_known_hosts(
    ssh_server: SshGitServer,
    ssh_repo: BareRemote,
    tmp_path: Path,
    key_name: str,
    kind: str,
    pem: bool,
    passphrase_key: str | None,
) -> None:
    passphrase = "hunter2 with spaces" if passphrase_key else ""
    private, public = _ssh_keygen(tmp_path / "id", kind, passphrase, pem)
    ssh_server.authorize(public)
    data = {key_name: private}
    if passphrase_key:
        data[passphrase_key] = passphrase.encode()
    creds = Credentials.from_secret_data(data, known_hosts=ssh_server.host_key_line)
    url = ssh_server.url_for(ssh_repo.path.name)

    repo = _clone(url, creds, tmp_path / "clone")
    pushed = _commit(repo, "first")
    _push(repo, url, creds)
    assert ssh_repo.tip() == str(pushed)

    ssh_repo.commit_foreign("foreign.txt", "x\n", "foreign change")
    repo.remotes["origin"].fetch(callbacks=remote_callbacks(creds, url))
    assert str(repo.references["refs/remotes/origin/main"].target) == ssh_repo.tip()


def test_ssh_hashed_known_hosts_from_ssh_keygen_is_accepted(
    ssh_server: SshGitServer, ssh_repo: BareRemote, deploy_key: PrivateKey, tmp_path: Path
) -> None:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed (Debian package openssh-client)")
    known = tmp_path / "known_hosts"
    known.write_text(f"# hashed by ssh-keygen -H\n{ssh_server.host_key_line}\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True, capture_output=True)
    assert known.read_text().splitlines()[-1].startswith("|1|")
    creds = _ssh_creds(deploy_key, known.read_text())
    _clone(ssh_server.url_for(ssh_repo.path.name), creds, tmp_path / "clone")


def test_ssh_server_with_several_host_key_types(tmp_path: Path) -> None:
    """libssh2 prefers ECDSA unless libgit2's homedir known_hosts says otherwise: with only
    the ed25519 line listed the connection fails closed, with the hint file it succeeds."""
    if sshd_binary() is None:
        pytest.skip("sshd is not installed (Debian package openssh-server)")
    key = _key()
    with SshGitServer(tmp_path / "sshd", host_key_types=("ed25519", "ecdsa", "rsa")) as server:
        server.authorize(_public(key))
        url = server.url_for(server.create_repo("multi").path.name)
        ed25519_only = _ssh_creds(key, server.host_key_line)

        reason, message = _failure(lambda: _clone(url, ed25519_only, tmp_path / "a"), ed25519_only)
        assert reason is GitFailure.HOST_KEY_UNKNOWN
        assert "lists only ssh-ed25519" in message

        _clone(url, _ssh_creds(key, "\n".join(server.host_key_lines)), tmp_path / "b")

        previous = pygit2.settings.homedir
        pygit2.settings.homedir = str(tmp_path / "libgit2-home")
        try:
            write_host_key_preferences(tmp_path / "libgit2-home", ed25519_only.known_hosts)
            _clone(url, ed25519_only, tmp_path / "c")
        finally:
            if previous is not None:
                pygit2.settings.homedir = previous


def test_ssh_wrong_key_is_authentication_failed(
    ssh_server: SshGitServer, ssh_repo: BareRemote, tmp_path: Path
) -> None:
    creds = _ssh_creds(_key(), ssh_server.host_key_line)
    url = ssh_server.url_for(ssh_repo.path.name)
    reason, message = _failure(lambda: _clone(url, creds, tmp_path / "clone"), creds)
    assert reason is GitFailure.AUTHENTICATION_FAILED
    assert creds.ssh_key is not None
    assert creds.ssh_key.fingerprint in message


def test_ssh_wrong_passphrase_is_authentication_failed(
    ssh_server: SshGitServer, ssh_repo: BareRemote, tmp_path: Path
) -> None:
    private, public = _ssh_keygen(tmp_path / "id", "ed25519", "right passphrase", pem=False)
    ssh_server.authorize(public)
    creds = Credentials.from_secret_data(
        {"identity": private, "passphrase": b"wrong passphrase"},
        known_hosts=ssh_server.host_key_line,
    )
    url = ssh_server.url_for(ssh_repo.path.name)
    reason, message = _failure(lambda: _clone(url, creds, tmp_path / "clone"), creds)
    assert reason is GitFailure.AUTHENTICATION_FAILED
    assert "wrong passphrase" not in message


def test_ssh_without_known_hosts_fails_closed_before_offering_the_key(
    ssh_server: SshGitServer, ssh_repo: BareRemote, deploy_key: PrivateKey, tmp_path: Path
) -> None:
    url = ssh_server.url_for(ssh_repo.path.name)
    repo = _clone(url, _ssh_creds(deploy_key, ssh_server.host_key_line), tmp_path / "clone")
    _commit(repo, "never-pushed")
    before, logins = ssh_repo.tip(), _accepted_logins(ssh_server)

    creds = _ssh_creds(deploy_key, known_hosts=None)
    reason, message = _failure(lambda: _push(repo, url, creds), creds)

    assert reason is GitFailure.HOST_KEY_UNKNOWN
    assert f"[127.0.0.1]:{ssh_server.port}" in message
    assert ssh_repo.tip() == before
    assert _accepted_logins(ssh_server) == logins


def test_ssh_known_hosts_for_another_port_is_unknown(
    ssh_server: SshGitServer, ssh_repo: BareRemote, deploy_key: PrivateKey, tmp_path: Path
) -> None:
    other_port = ssh_server.host_key_line.replace(f":{ssh_server.port} ", ":1 ")
    creds = _ssh_creds(deploy_key, f"127.0.0.1 {ssh_server.host_public_key}\n{other_port}")
    url = ssh_server.url_for(ssh_repo.path.name)
    reason, _ = _failure(lambda: _clone(url, creds, tmp_path / "clone"), creds)
    assert reason is GitFailure.HOST_KEY_UNKNOWN


def test_ssh_mismatching_host_key_is_refused(
    ssh_server: SshGitServer, ssh_repo: BareRemote, deploy_key: PrivateKey, tmp_path: Path
) -> None:
    url = ssh_server.url_for(ssh_repo.path.name)
    repo = _clone(url, _ssh_creds(deploy_key, ssh_server.host_key_line), tmp_path / "clone")
    _commit(repo, "never-pushed")
    before = ssh_repo.tip()
    impostor = f"[127.0.0.1]:{ssh_server.port} {_public(_key())}"

    creds = _ssh_creds(deploy_key, impostor)
    reason, message = _failure(lambda: _push(repo, url, creds), creds)

    assert reason is GitFailure.HOST_KEY_MISMATCH
    assert "mismatch" in message
    assert ssh_repo.tip() == before


def test_ssh_read_only_key_fetches_but_push_is_permission_denied(
    ssh_server: SshGitServer, ssh_repo: BareRemote, tmp_path: Path
) -> None:
    key = _key()
    ssh_server.authorize(_public(key), read_only=True)
    creds = _ssh_creds(key, ssh_server.host_key_line)
    url = ssh_server.url_for(ssh_repo.path.name)
    repo = _clone(url, creds, tmp_path / "clone")
    _commit(repo, "refused")
    before = ssh_repo.tip()

    reason, message = _failure(lambda: _push(repo, url, creds), creds)

    assert reason is GitFailure.PERMISSION_DENIED
    assert "read only" in message
    assert ssh_repo.tip() == before


def test_ssh_missing_repository_and_closed_port(
    ssh_server: SshGitServer, deploy_key: PrivateKey, tmp_path: Path
) -> None:
    creds = _ssh_creds(deploy_key, ssh_server.host_key_line)
    missing = ssh_server.url_for("does-not-exist")
    reason, _ = _failure(lambda: _clone(missing, creds, tmp_path / "a"), creds)
    assert reason is GitFailure.REPOSITORY_NOT_FOUND

    closed = "ssh://git@127.0.0.1:1/repo.git"
    reason, _ = _failure(lambda: _clone(closed, creds, tmp_path / "b"), creds)
    assert reason is GitFailure.REMOTE_UNREACHABLE


# --- HTTPS -------------------------------------------------------------------------------

PASSWORD = "correct-horse-battery"
TOKEN = "glpat-0123456789abcdefghij"


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsGitServer]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (Debian packages nginx, fcgiwrap)")
    with HttpsGitServer(tmp_path_factory.mktemp("https")) as server:
        server.add_user("writer", PASSWORD)
        server.add_user("reader", PASSWORD, read_only=True)
        server.add_user("x-access-token", TOKEN)
        server.add_bearer_token(TOKEN[::-1], "robot")
        yield server


@pytest.fixture
def https_repo(https_server: HttpsGitServer, request: pytest.FixtureRequest) -> BareRemote:
    return https_server.create_repo(request.node.name.replace("[", "-").strip("]"))


def _https_creds(server: HttpsGitServer, **data: str) -> Credentials:
    return Credentials.from_secret_data(
        {"ca.crt": server.ca_pem, **{k: v.encode() for k, v in data.items()}}
    )


@pytest.mark.parametrize(
    "data",
    [
        {"username": "writer", "password": PASSWORD},
        {"token": TOKEN},
        {"bearerToken": TOKEN[::-1]},
    ],
    ids=["basic", "token", "bearer"],
)
def test_https_clone_and_push(
    https_server: HttpsGitServer, https_repo: BareRemote, tmp_path: Path, data: dict[str, str]
) -> None:
    creds = _https_creds(https_server, **data)
    url = https_server.url_for(https_repo.path.name)
    repo = _clone(url, creds, tmp_path / "clone")
    pushed = _commit(repo, "over-https")
    _push(repo, url, creds)
    assert https_repo.tip() == str(pushed)


def test_https_wrong_password_is_authentication_failed(
    https_server: HttpsGitServer, https_repo: BareRemote, tmp_path: Path
) -> None:
    creds = _https_creds(https_server, username="writer", password="not-the-password")
    url = https_server.url_for(https_repo.path.name)
    reason, message = _failure(lambda: _clone(url, creds, tmp_path / "clone"), creds)
    assert reason is GitFailure.AUTHENTICATION_FAILED
    assert "not-the-password" not in message
    assert "not-the-password" not in repr(creds)


def test_https_read_only_user_push_is_permission_denied(
    https_server: HttpsGitServer, https_repo: BareRemote, tmp_path: Path
) -> None:
    creds = _https_creds(https_server, username="reader", password=PASSWORD)
    url = https_server.url_for(https_repo.path.name)
    repo = _clone(url, creds, tmp_path / "clone")
    _commit(repo, "refused")
    before = https_repo.tip()
    reason, _ = _failure(lambda: _push(repo, url, creds), creds)
    assert reason is GitFailure.PERMISSION_DENIED
    assert https_repo.tip() == before


def test_https_missing_repository(https_server: HttpsGitServer, tmp_path: Path) -> None:
    creds = _https_creds(https_server, username="writer", password=PASSWORD)
    url = https_server.url_for("does-not-exist")
    reason, _ = _failure(lambda: _clone(url, creds, tmp_path / "clone"), creds)
    assert reason is GitFailure.REPOSITORY_NOT_FOUND


@pytest.mark.parametrize("ca", ["none", "other"])
def test_https_untrusted_certificate_is_refused_before_any_request(
    https_server: HttpsGitServer, https_repo: BareRemote, tmp_path: Path, ca: str
) -> None:
    data = {"username": b"writer", "password": PASSWORD.encode()}
    if ca == "other":
        data["ca.crt"] = CertificateAuthority().cert_pem
    creds = Credentials.from_secret_data(data)
    url = https_server.url_for(https_repo.path.name)
    reason, _ = _failure(lambda: _clone(url, creds, tmp_path / "clone"), creds)
    assert reason is GitFailure.CERTIFICATE_UNTRUSTED
    access_log = (https_server.workdir / "nginx-access.log").read_text()
    assert https_repo.path.name not in access_log


def test_https_system_trust_is_used_without_a_secret_ca(
    https_server: HttpsGitServer, https_repo: BareRemote, tmp_path: Path
) -> None:
    """pygit2 takes its trust store from OpenSSL's defaults (SSL_CERT_FILE); libgit2 only ever
    adds to it, so this runs in a fresh interpreter."""
    bundle = tmp_path / "system-ca.pem"
    bundle.write_bytes(https_server.ca_pem)
    script = (
        "import sys, pygit2\n"
        "from kubescribe.git.transport.callbacks import remote_callbacks\n"
        "from kubescribe.git.transport.secret import Credentials\n"
        "url, dest, password = sys.argv[1:]\n"
        "data = {'username': b'writer', 'password': password.encode()}\n"
        "creds = Credentials.from_secret_data(data)\n"
        "pygit2.clone_repository(url, dest, callbacks=remote_callbacks(creds, url))\n"
    )
    url = https_server.url_for(https_repo.path.name)
    done = subprocess.run(
        [sys.executable, "-c", script, url, str(tmp_path / "clone"), PASSWORD],
        env={**os.environ, "SSL_CERT_FILE": str(bundle)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "clone" / ".git").is_dir()


# --- the cache repository over both transports -------------------------------------------


@pytest.mark.parametrize("transport", ["ssh", "https"])
def test_cache_fetches_pushes_and_a_lost_race_is_push_rejected(
    transport: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The tip comes from the remote's answer, the commit is pushed by its id (no scratch ref
    on either side), and a push over a branch that moved meanwhile is `PushRejected`."""
    if transport == "ssh":
        ssh: SshGitServer = request.getfixturevalue("ssh_server")
        remote: BareRemote = request.getfixturevalue("ssh_repo")
        creds = _ssh_creds(request.getfixturevalue("deploy_key"), ssh.host_key_line)
        url = ssh.url_for(remote.path.name)
    else:
        https: HttpsGitServer = request.getfixturevalue("https_server")
        remote = request.getfixturevalue("https_repo")
        creds = _https_creds(https, username="writer", password=PASSWORD)
        url = https.url_for(remote.path.name)
    repo = GitRepository(url, tmp_path / "cache", functools.partial(remote_callbacks, creds, url))
    base = repo.fetch("main")
    assert base is not None
    assert str(base) == remote.tip()
    assert repo.fetch("absent") is None
    sig = pygit2.Signature("k", "k@example.invalid")
    tree = repo.repo[base].peel(pygit2.Tree).id
    ours = repo.repo.create_commit(None, sig, sig, "ours", tree, [base])
    repo.push("main", ours, base)
    assert remote.tip() == str(ours)
    late = repo.repo.create_commit(None, sig, sig, "late", tree, [ours])
    remote.commit_foreign("foreign.txt", "x\n", "foreign")
    with pytest.raises(PushRejected) as lost:
        repo.push("main", late, ours)
    assert lost.value.reason == "PushRejected"
    assert str(repo.fetch("main")) == remote.tip()
    assert not [r for r in repo.repo.references if r.startswith("refs/kubescribe/")]
    assert "kubescribe" not in git("for-each-ref", cwd=remote.path)
