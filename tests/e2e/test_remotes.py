"""The operator against real Git servers on loopback: OpenSSH `sshd` and nginx + `git
http-backend` over HTTPS. Credentials come from Secrets; GitProvider status says whether the
remote can be read and written and why not; commits are signed; one writer per repository and
branch; foreign pushes under load are kept."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe.git.signing import SigningKey
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.httpgit import HttpsGitServer
from kubescribe_devenv.sshgit import SshGitServer, sshd_binary
from tests.gitsig import allowed_signers, git_verify_commit, ssh_keygen_verify
from tests.manifests import (
    CM_RULE,
    PASSWORD,
    cm_path,
    configmap,
    https_secret,
    keypair,
    provider,
    secret,
    target,
    watch_rule,
)
from tests.support import Operator, condition, manifest, metric, stays, wait_condition, wait_for

pytestmark = pytest.mark.controlplane

WRONG_PASSWORD = "not-the-password-7f3a"


# --- fixtures and helpers -----------------------------------------------------------------


@pytest.fixture(scope="module")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshGitServer]:
    if sshd_binary() is None:
        pytest.skip("sshd is not installed (Debian package openssh-server)")
    with SshGitServer(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def ssh_secret(name: str, ns: str, private_key: str, known_hosts: str | None) -> dict[str, Any]:
    data: dict[str, str | bytes] = {"ssh-privatekey": private_key}
    if known_hosts is not None:
        data["known_hosts"] = known_hosts
    return secret(name, ns, data)


@dataclass(frozen=True)
class Access:
    """A new repository on one transport, and Secrets `git-creds` that reach it: one that may
    push, one the server refuses (a part of which must never be shown), one that may only
    fetch."""

    repo: BareRemote
    url: str
    writer: dict[str, Any]
    wrong: dict[str, Any]
    reader: dict[str, Any]
    never_shown: str


@pytest.fixture(params=["ssh", "https"])
def access(request: pytest.FixtureRequest, namespace: str) -> Access:
    ns = namespace
    if request.param == "ssh":
        ssh: SshGitServer = request.getfixturevalue("ssh_server")
        (writer, writer_public), (reader, reader_public) = keypair(), keypair()
        ssh.authorize(writer_public)
        ssh.authorize(reader_public, read_only=True)
        wrong = keypair()[0]
        repo = ssh.create_repo(f"{ns}-ssh")
        return Access(
            repo=repo,
            url=ssh.url_for(repo.path.name),
            writer=ssh_secret("git-creds", ns, writer, ssh.host_key_line),
            wrong=ssh_secret("git-creds", ns, wrong, ssh.host_key_line),
            reader=ssh_secret("git-creds", ns, reader, ssh.host_key_line),
            never_shown=wrong.splitlines()[1],
        )
    https: HttpsGitServer = request.getfixturevalue("https_server")
    repo = https.create_repo(f"{ns}-https")
    return Access(
        repo=repo,
        url=https.url_for(repo.path.name),
        writer=https_secret("git-creds", ns, https, "writer", PASSWORD),
        wrong=https_secret("git-creds", ns, https, "writer", WRONG_PASSWORD),
        reader=https_secret("git-creds", ns, https, "reader", PASSWORD),
        never_shown=WRONG_PASSWORD,
    )


def mirror_of(provider_name: str, ns: str, url: str, **spec: Any) -> str:
    """A GitProvider, a GitTarget `mirror` (folder `mirror`) and a rule for ConfigMaps."""
    return manifest(
        provider(provider_name, ns, url, **spec),
        target("mirror", ns, provider_name, "mirror"),
        watch_rule("rule", ns, "mirror", CM_RULE),
    )


def status_of(cp: ControlPlane, kind: str, name: str, ns: str) -> dict[str, Any]:
    return dict(cp.get_json(kind, name, "-n", ns).get("status") or {})


def linear(remote: BareRemote) -> bool:
    return git("rev-list", "--min-parents=2", remote.branch, cwd=remote.path).strip() == ""


def enable_reflog(remote: BareRemote) -> None:
    git("config", "core.logAllRefUpdates", "always", cwd=remote.path)


def only_fast_forwards(remote: BareRemote) -> list[str]:
    """Every update of the branch recorded by the server, checked to be a fast-forward;
    returns the tips it moved through."""
    log = (remote.path / "logs" / "refs" / "heads" / remote.branch).read_text().splitlines()
    tips = []
    for line in log:
        old, new = line.split()[:2]
        if set(old) != {"0"}:
            done = subprocess.run(
                ["git", "merge-base", "--is-ancestor", old, new],
                cwd=remote.path,
                capture_output=True,
                check=False,
            )
            assert done.returncode == 0, f"forced update {old[:12]} -> {new[:12]}"
        tips.append(new)
    return tips


def mirrored_configmaps(remote: BareRemote, ns: str, folder: str = "mirror") -> dict[str, Any]:
    prefix = f"{folder}/{ns}/core/configmaps/"
    out = {}
    for path in remote.files():
        if path.startswith(prefix):
            doc = yaml.safe_load(remote.read(path))
            out[doc["metadata"]["name"]] = doc.get("data") or {}
    return out


def cluster_configmaps(cp: ControlPlane, ns: str) -> dict[str, Any]:
    items = cp.get_json("configmaps", "-n", ns)["items"]
    return {
        i["metadata"]["name"]: i.get("data") or {}
        for i in items
        if i["metadata"]["name"] != "kube-root-ca.crt"
    }


def log_events(op: Operator, event: str) -> list[dict[str, Any]]:
    out = []
    for line in op.logs().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event:
            out.append(record)
    return out


# --- transports ---------------------------------------------------------------------------


def test_configmap_mirrored_over_ssh_with_known_hosts_from_a_configmap(
    crds: ControlPlane,
    namespace: str,
    ssh_server: SshGitServer,
    operator: Callable[..., Operator],
) -> None:
    cp, ns = crds, namespace
    private, public = keypair()
    ssh_server.authorize(public)
    repo = ssh_server.create_repo(f"{ns}-ssh")
    op = operator()
    hosts = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "git-hosts", "namespace": ns},
        "data": {"hosts": ssh_server.host_key_line},
    }
    cp.apply(manifest(ssh_secret("git-creds", ns, private, None), hosts))
    cp.apply(
        mirror_of(
            "git",
            ns,
            ssh_server.url_for(repo.path.name),
            secretRef={"name": "git-creds"},
            knownHostsRef={"kind": "ConfigMap", "name": "git-hosts", "key": "hosts"},
        )
    )
    cp.kubectl("create", "configmap", "over-ssh", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: cm_path(ns, "over-ssh") in repo.files(), timeout=60, what="file over SSH")
    readable = wait_condition(cp, "gitprovider", "git", ns, "Readable", "True")
    assert "main" in readable["message"]
    wait_condition(cp, "gitprovider", "git", ns, "Writable", "True")
    wait_condition(cp, "gitprovider", "git", ns, "Ready", "True")
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "True")
    assert remote_url_in_status(cp, ns).startswith("ssh://root@127.0.0.1:")
    assert private.splitlines()[1] not in op.logs()


def remote_url_in_status(cp: ControlPlane, ns: str, name: str = "git") -> str:
    return str(status_of(cp, "gitprovider", name, ns)["normalizedUrl"])


def test_configmap_mirrored_over_https_with_a_private_ca(
    crds: ControlPlane,
    namespace: str,
    https_server: HttpsGitServer,
    operator: Callable[..., Operator],
) -> None:
    cp, ns = crds, namespace
    repo = https_server.create_repo(f"{ns}-https")
    op = operator()
    cp.apply(manifest(https_secret("git-creds", ns, https_server, "writer", PASSWORD)))
    cp.apply(
        mirror_of("git", ns, https_server.url_for(repo.path.name), secretRef={"name": "git-creds"})
    )
    cp.kubectl("create", "configmap", "over-https", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: cm_path(ns, "over-https") in repo.files(), timeout=60, what="file over HTTPS")
    wait_condition(cp, "gitprovider", "git", ns, "Readable", "True")
    wait_condition(cp, "gitprovider", "git", ns, "Writable", "True")
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "True")
    assert PASSWORD not in op.logs()


def test_wrong_credentials_are_authentication_failed_until_the_secret_is_fixed(
    crds: ControlPlane, namespace: str, access: Access, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    op = operator()
    before = access.repo.tip()
    cp.apply(manifest(access.wrong))
    cp.apply(mirror_of("git", ns, access.url, secretRef={"name": "git-creds"}))
    cp.kubectl("create", "configmap", "waiting", "-n", ns, "--from-literal=a=1")

    ready = wait_condition(cp, "gitprovider", "git", ns, "Ready", "False", "AuthenticationFailed")
    assert "authentication failed" in ready["message"]
    assert access.never_shown not in ready["message"]
    stalled = condition(cp, "gitprovider", "git", ns, "Stalled")
    assert stalled is not None
    assert stalled["status"] == "True"
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "False", "AuthenticationFailed")
    assert access.repo.tip() == before
    assert access.never_shown not in op.logs()
    events = cp.kubectl("get", "events", "-n", ns, "-o", "json").stdout
    assert "AuthenticationFailed" in events
    assert access.never_shown not in events

    cp.apply(manifest(access.writer))  # the operator reads the Secret again and probes again
    wait_condition(cp, "gitprovider", "git", ns, "Ready", "True", timeout=90)
    wait_for(
        lambda: cm_path(ns, "waiting") in access.repo.files(), timeout=90, what="file after fix"
    )
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "True")


def test_server_with_several_host_key_types_and_only_its_ed25519_key_listed(
    crds: ControlPlane,
    namespace: str,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    """Like GitHub: the server has ECDSA, RSA and ed25519 host keys; known_hosts lists only the
    ed25519 one. libssh2 would ask for ECDSA first and fail closed; the operator's host-key
    preference file (libgit2's home) makes it ask for the listed type."""
    if sshd_binary() is None:
        pytest.skip("sshd is not installed (Debian package openssh-server)")
    cp, ns = crds, namespace
    private, public = keypair()
    with SshGitServer(tmp_path / "sshd", host_key_types=("ecdsa", "rsa", "ed25519")) as server:
        server.authorize(public)
        repo = server.create_repo("multi")
        ed25519_line = next(line for line in server.host_key_lines if "ssh-ed25519" in line)
        operator()
        cp.apply(manifest(ssh_secret("git-creds", ns, private, ed25519_line)))
        cp.apply(
            mirror_of("git", ns, server.url_for(repo.path.name), secretRef={"name": "git-creds"})
        )
        cp.kubectl("create", "configmap", "multi", "-n", ns, "--from-literal=a=1")
        wait_for(lambda: cm_path(ns, "multi") in repo.files(), timeout=60, what="file over SSH")
        wait_condition(cp, "gitprovider", "git", ns, "Ready", "True")


def test_unknown_and_mismatching_ssh_host_keys_are_refused(
    crds: ControlPlane,
    namespace: str,
    ssh_server: SshGitServer,
    operator: Callable[..., Operator],
) -> None:
    cp, ns = crds, namespace
    private, public = keypair()
    ssh_server.authorize(public)
    unknown = ssh_server.create_repo(f"{ns}-unknown")
    mismatch = ssh_server.create_repo(f"{ns}-mismatch")
    impostor = f"[127.0.0.1]:{ssh_server.port} {keypair()[1]}"
    operator()
    cp.apply(
        manifest(
            ssh_secret("no-hosts", ns, private, None),
            ssh_secret("wrong-host", ns, private, impostor),
        )
    )
    for name, repo, creds in (
        ("unknown", unknown, "no-hosts"),
        ("mismatch", mismatch, "wrong-host"),
    ):
        cp.apply(
            manifest(
                provider(name, ns, ssh_server.url_for(repo.path.name), secretRef={"name": creds}),
                target(f"t-{name}", ns, name, "mirror"),
                watch_rule(f"r-{name}", ns, f"t-{name}", CM_RULE),
            )
        )
    cp.kubectl("create", "configmap", "never", "-n", ns, "--from-literal=a=1")
    ready = wait_condition(cp, "gitprovider", "unknown", ns, "Ready", "False", "HostKeyUnknown")
    assert f"[127.0.0.1]:{ssh_server.port}" in ready["message"]
    ready = wait_condition(cp, "gitprovider", "mismatch", ns, "Ready", "False", "HostKeyMismatch")
    assert "mismatch" in ready["message"]
    wait_condition(cp, "gittarget", "t-unknown", ns, "Ready", "False", "HostKeyUnknown")
    wait_condition(cp, "gittarget", "t-mismatch", ns, "Ready", "False", "HostKeyMismatch")
    assert unknown.files() == []
    assert mismatch.files() == []


def test_read_only_credentials_are_readable_but_not_writable(
    crds: ControlPlane, namespace: str, access: Access, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    before = access.repo.tip()
    cp.apply(manifest(access.reader))
    cp.apply(mirror_of("git", ns, access.url, secretRef={"name": "git-creds"}))
    cp.kubectl("create", "configmap", "refused", "-n", ns, "--from-literal=a=1")

    writable = wait_condition(cp, "gitprovider", "git", ns, "Writable", "False", "PermissionDenied")
    assert "refused" in writable["message"] or "denied" in writable["message"]
    wait_condition(cp, "gitprovider", "git", ns, "Readable", "True")
    wait_condition(cp, "gitprovider", "git", ns, "Ready", "True")  # it can be read
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "False", "PermissionDenied")
    assert access.repo.tip() == before
    # A later probe (or a retried push) does not turn the proven denial into Unknown or True.
    stays(
        lambda: (
            (condition(cp, "gitprovider", "git", ns, "Writable") or {}).get("status") == "False"
        ),
        seconds=2,
        what="Writable=False",
    )


# --- signing ------------------------------------------------------------------------------


def _ssh_keygen_key(path: Path) -> tuple[str, str, str]:
    """(private key, public key line, fingerprint) of a key made by `ssh-keygen` itself."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "signer", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    shown = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(path)], check=True, capture_output=True, text=True
    ).stdout
    return path.read_text(), path.with_suffix(".pub").read_text().strip(), shown.split()[1]


def _operator_commits(remote: BareRemote) -> list[str]:
    """Every commit on the branch except the seed (the root)."""
    return git("rev-list", "--no-max-parents", "--min-parents=1", "main", cwd=remote.path).split()


def test_operator_commits_are_signed_and_verify_with_git_and_ssh_keygen(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    private, public, fingerprint = _ssh_keygen_key(tmp_path / "signer")
    cp.kubectl("create", "configmap", "before", "-n", ns, "--from-literal=a=1")
    operator()
    cp.apply(manifest(secret("commit-signing", ns, {"signing.key": private})))
    cp.apply(mirror_of("git", ns, remote.url, signing={"secretRef": {"name": "commit-signing"}}))
    wait_for(lambda: cm_path(ns, "before") in remote.files(), what="backfill")
    cp.kubectl("create", "configmap", "fresh", "-n", ns, "--from-literal=a=1")
    cp.kubectl("patch", "configmap", "fresh", "-n", ns, "-p", '{"data":{"a":"2"}}')
    cp.kubectl("delete", "configmap", "before", "-n", ns)
    wait_for(
        lambda: (
            cm_path(ns, "before") not in remote.files()
            and "a: '2'" in remote.read(cm_path(ns, "fresh"))
        ),
        what="changes mirrored",
    )

    status = status_of(cp, "gitprovider", "git", ns)
    assert status["signingKey"]["fingerprint"] == fingerprint
    assert status["signingKey"]["publicKey"].split()[:2] == public.split()[:2]
    loaded = condition(cp, "gitprovider", "git", ns, "SigningKeyLoaded")
    assert loaded is not None
    assert loaded["status"] == "True"
    signers = allowed_signers(tmp_path / "allowed_signers", public)
    commits = _operator_commits(remote)
    assert len(commits) >= 4  # backfill, create, update, delete
    for sha in commits:
        assert fingerprint in git_verify_commit(remote.path, sha, signers)
        assert "Good" in ssh_keygen_verify(remote.path, sha, signers, tmp_path / "sigs")


def test_generate_when_missing_creates_the_key_secret_and_publishes_the_public_key(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    operator()
    signing = {"secretRef": {"name": "generated-signing"}, "generateWhenMissing": True}
    cp.apply(mirror_of("git", ns, remote.url, signing=signing))
    cp.kubectl("create", "configmap", "signed", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: cm_path(ns, "signed") in remote.files(), what="signed commit")

    stored = cp.get_json("secret", "generated-signing", "-n", ns)
    assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubescribe"
    key = SigningKey.from_openssh(base64.b64decode(stored["data"]["signing.key"]))
    published = wait_for(
        lambda: status_of(cp, "gitprovider", "git", ns).get("signingKey"), what="signingKey"
    )
    assert published["fingerprint"] == key.fingerprint
    assert published["publicKey"].split()[:2] == key.public_key_line.split()[:2]
    signers = allowed_signers(tmp_path / "allowed_signers", published["publicKey"])
    for sha in _operator_commits(remote):
        git_verify_commit(remote.path, sha, signers)
        ssh_keygen_verify(remote.path, sha, signers, tmp_path / "sigs")


def test_no_commit_is_made_while_the_signing_key_is_missing(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    seed = remote.tip()
    operator()
    cp.apply(mirror_of("git", ns, remote.url, signing={"secretRef": {"name": "late-key"}}))
    cp.kubectl("create", "configmap", "held", "-n", ns, "--from-literal=a=1")
    ready = wait_condition(cp, "gitprovider", "git", ns, "Ready", "False", "SigningKeyMissing")
    assert "late-key" in ready["message"]
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "False", "SigningKeyMissing")
    stays(lambda: remote.tip() == seed, seconds=2, what="no commit without the key")

    private, public, fingerprint = _ssh_keygen_key(tmp_path / "late")
    cp.apply(manifest(secret("late-key", ns, {"signing.key": private})))
    wait_for(lambda: cm_path(ns, "held") in remote.files(), timeout=90, what="commit with key")
    signers = allowed_signers(tmp_path / "allowed_signers", public)
    for sha in _operator_commits(remote):
        assert fingerprint in git_verify_commit(remote.path, sha, signers)


# --- write safety -------------------------------------------------------------------------


def team(name: str) -> dict[str, Any]:
    return {"matchLabels": {"team": name}}


def test_two_providers_on_one_repository_share_one_writer(
    crds: ControlPlane,
    namespace: str,
    ssh_server: SshGitServer,
    operator: Callable[..., Operator],
) -> None:
    cp, ns = crds, namespace
    key_a, public_a = keypair()
    key_b, public_b = keypair()
    ssh_server.authorize(public_a)
    ssh_server.authorize(public_b)
    repo = ssh_server.create_repo(f"{ns}-shared")
    enable_reflog(repo)
    url = ssh_server.url_for(repo.path.name)
    per_team = 15
    op = operator()
    cp.apply(
        manifest(
            ssh_secret("creds-a", ns, key_a, ssh_server.host_key_line),
            ssh_secret("creds-b", ns, key_b, ssh_server.host_key_line),
            # The same repository spelled two ways: one normalized URL, one writer.
            provider("git-a", ns, url, secretRef={"name": "creds-a"}),
            provider("git-b", ns, url.removesuffix(".git"), secretRef={"name": "creds-b"}),
            target("team-a", ns, "git-a", "teams/a"),
            target("team-b", ns, "git-b", "teams/b"),
            watch_rule("a", ns, "team-a", {**CM_RULE, "labelSelector": team("a")}),
            watch_rule("b", ns, "team-b", {**CM_RULE, "labelSelector": team("b")}),
        )
    )
    wait_condition(cp, "gittarget", "team-a", ns, "Ready", "True")
    wait_condition(cp, "gittarget", "team-b", ns, "Ready", "True")
    assert remote_url_in_status(cp, ns, "git-a") == remote_url_in_status(cp, ns, "git-b")

    def create(who: str) -> None:
        for i in range(per_team):
            cp.apply(manifest(configmap(f"{who}-{i}", ns, {"i": str(i)}, team=who)))

    threads = [threading.Thread(target=create, args=(who,)) for who in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = {
        cm_path(ns, f"{team}-{i}", f"teams/{team}") for team in "ab" for i in range(per_team)
    }
    wait_for(lambda: expected <= set(repo.files()), timeout=90, what="both teams' files")

    assert set(repo.files()) == expected
    assert linear(repo)
    messages = [c["message"] for c in repo.log()]
    created = sorted(m.removeprefix(f"CREATE ConfigMap {ns}/") for m in messages if "CREATE" in m)
    assert created == sorted(f"{team}-{i}" for team in "ab" for i in range(per_team))
    tips = only_fast_forwards(repo)
    assert tips[-1] == repo.tip()
    writers = {(r["repo"], r["branch"]) for r in log_events(op, "writer.pushed")}
    assert len(writers) == 1, writers

    # A target of the other provider inside team-a's folder is refused, not raced.
    cp.apply(
        manifest(target("greedy", ns, "git-b", "teams"), watch_rule("g", ns, "greedy", CM_RULE))
    )
    overlap = wait_condition(cp, "gittarget", "greedy", ns, "Validated", "False", "PathOverlap")
    assert "team-" in overlap["message"]


def test_foreign_pushes_during_a_stream_of_changes_are_all_kept(
    crds: ControlPlane,
    namespace: str,
    ssh_server: SshGitServer,
    operator: Callable[..., Operator],
) -> None:
    cp, ns = crds, namespace
    private, public = keypair()
    ssh_server.authorize(public)
    repo = ssh_server.create_repo(f"{ns}-busy")
    enable_reflog(repo)
    op = operator()
    cp.apply(manifest(ssh_secret("git-creds", ns, private, ssh_server.host_key_line)))
    cp.apply(
        mirror_of("git", ns, ssh_server.url_for(repo.path.name), secretRef={"name": "git-creds"})
    )
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "True")

    foreign: list[str] = []
    foreign_rejected = 0
    stop = threading.Event()

    def push_foreign() -> None:
        nonlocal foreign_rejected
        deadline = time.monotonic() + 120
        while len(foreign) < 40 and not stop.is_set() and time.monotonic() < deadline:
            n = len(foreign)
            try:
                foreign.append(repo.commit_foreign(f"foreign/{n}.txt", f"{n}\n", f"Foreign {n}"))
            except RuntimeError:  # the operator pushed first: the next try starts from its tip
                foreign_rejected += 1
                continue
            stop.wait(0.5)  # a busy bot, not a tight loop: the operator gets turns too

    started = time.monotonic()
    pusher = threading.Thread(target=push_foreign)
    pusher.start()
    try:
        for batch in range(6):
            cp.apply(manifest(*(configmap(f"cm-{batch}-{j}", ns, {"v": "1"}) for j in range(5))))
        for batch in range(3):
            for j in range(5):
                cp.kubectl("patch", "configmap", f"cm-{batch}-{j}", "-n", ns,
                           "-p", json.dumps({"data": {"v": "2"}}))  # fmt: skip
        for j in range(5):
            cp.kubectl("delete", "configmap", f"cm-5-{j}", "-n", ns)
    finally:
        pusher.join(timeout=150)
        stop.set()
    assert not pusher.is_alive()

    expected = cluster_configmaps(cp, ns)
    wait_for(
        lambda: mirrored_configmaps(repo, ns) == expected, timeout=120, what="mirror = cluster"
    )
    history = set(git("rev-list", "main", cwd=repo.path).split())
    assert len(foreign) == 40
    assert set(foreign) <= history
    files = set(repo.files())
    assert {f"foreign/{n}.txt" for n in range(40)} <= files
    assert linear(repo)
    only_fast_forwards(repo)
    figures = {
        "foreign_commits": len(foreign),
        "foreign_push_retries": foreign_rejected,
        "operator_commits": len(history) - len(foreign) - 1,
        "operator_pushes_rejected": metric(op, "kubescribe_pushes_total", 'result="rejected"'),
        "operator_pushes_ok": metric(op, "kubescribe_pushes_total", 'result="ok"'),
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps({"foreign_pushes_under_load": figures}))


# --- URL policy ---------------------------------------------------------------------------


def test_local_and_credential_urls_are_refused_without_the_flag(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
) -> None:
    cp, ns = crds, namespace
    op = operator(allow_file_urls=False)
    cp.apply(
        manifest(
            provider("local", ns, remote.url),
            provider("inline", ns, "https://robot:s3cr3t-t0ken@git.example/org/repo.git"),
            target("mirror", ns, "local", "mirror"),
            watch_rule("rule", ns, "mirror", CM_RULE),
        )
    )
    local = wait_condition(cp, "gitprovider", "local", ns, "Validated", "False", "UrlRefused")
    assert "SchemeNotAllowed" in local["message"]
    inline = wait_condition(cp, "gitprovider", "inline", ns, "Validated", "False", "UrlRefused")
    assert "CredentialsInURL" in inline["message"]
    assert "s3cr3t" not in json.dumps(cp.get_json("gitprovider", "inline", "-n", ns)["status"])
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "False", "ProviderNotReady")
    assert remote.files() == []
    assert "s3cr3t" not in op.logs()
