"""Secrets end to end: only ever SOPS-encrypted in Git, never in plaintext anywhere.

A real kube-apiserver, the operator process, a bare Git remote, and the real `sops` binary
(from the venv) as the judge of what a person with an age key can read.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.exceptions import InvalidTag

from kubescribe.secrets import _cipher
from kubescribe.secrets import sops as sops_module
from kubescribe.secrets.age import (
    generate_identity,
    load_identities,
    parse_identities,
    recipient_of,
)
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from tests.manifests import CM_RULE, configmap, provider, string_secret, target, watch_rule
from tests.support import Operator, manifest, wait_condition, wait_for

pytestmark = pytest.mark.controlplane

SOPS = shutil.which("sops", path=str(Path(sys.executable).parent))
SECRET_RULE = {"apiGroups": [""], "resources": ["secrets"]}
CANARY = "canary-7d1e5a0b-plaintext"
CANARY_2 = "canary-2c9f44e1-plaintext"
LABEL_CANARY = "lbl-canary-5b7e03c1"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def key_secret(name: str, namespace: str, identity: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": {"team.agekey": f"# a key file\n{identity}\n"},
    }


def secret_path(ns: str, name: str) -> str:
    return f"mirror/{ns}/core/secrets/{name}.sops.yaml"


def setup(
    cp: ControlPlane, ns: str, remote: BareRemote, *rules: dict[str, Any], **spec: Any
) -> None:
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror", **spec),
            watch_rule("rule", ns, "mirror", *rules),
        )
    )


def encrypting(
    cp: ControlPlane,
    ns: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    identity: str,
    *secrets: dict[str, Any],
) -> Operator:
    """`secrets` and the operator's age key Secret `age-key` (holding `identity`) applied, the
    operator started, and a target that mirrors Secrets encrypted with that key."""
    cp.apply(manifest(key_secret("age-key", ns, identity), *secrets))
    op = operator()
    setup(cp, ns, remote, SECRET_RULE, encryption={"ageKeySecretRef": {"name": "age-key"}})
    return op


def sops_decrypt(data: str, identity: str, workdir: Path) -> dict[str, Any]:
    """Decrypt with the real sops binary, as a person holding `identity` would."""
    assert SOPS is not None, "sops binary not found next to python"
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "in.sops.yaml"
    path.write_text(data)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOPS_")}
    env.update(SOPS_AGE_KEY=identity, HOME=str(workdir))
    done = subprocess.run(
        [SOPS, "--disable-version-check", "decrypt", str(path)],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = yaml.safe_load(done.stdout)
    return loaded


def enc_values(data: str) -> dict[str, str]:
    return dict(yaml.safe_load(data)["data"])


def assert_never_in_plaintext(remote: BareRemote, operators: list[Operator], *values: str) -> None:
    """Neither the value nor its base64 form (as Secret data holds it) in any object of the
    remote (every branch, and objects no branch reaches), in the operator's logs and metrics,
    or in the status and Events of the kubescribe objects."""
    objects = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch", "--unordered"],
        cwd=remote.path,
        capture_output=True,
        check=True,
    ).stdout.decode(errors="replace")
    history = git("log", "-p", "--all", cwd=remote.path)
    logs = "".join(op.logs() for op in operators)
    cp = operators[0].cp
    api = cp.kubectl("get", "gittargets,gitproviders,watchrules,events", "-A", "-o", "json").stdout
    metrics = "".join(op.metrics() for op in operators if op.proc and op.proc.poll() is None)
    assert history
    assert logs
    for value in values:
        for form in (value, b64(value)):
            assert form not in objects, "plaintext in a Git object"
            assert form not in history, "plaintext in Git history"
            assert form not in logs, "plaintext in the operator's logs"
            assert form not in api, "plaintext in a status or an Event"
            assert form not in metrics, "plaintext in the metrics"


def refused(op: Operator, reason: str) -> float:
    for line in op.metrics().splitlines():
        if line.startswith(f'kubescribe_refused_documents_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_secret_is_encrypted_stable_and_never_in_plaintext(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    first = operator()
    db = string_secret("db", ns, user="app", password=CANARY)
    # Tools keep whole manifests in annotations, and checksums of values in labels.
    db["metadata"]["annotations"] = {"tool.example.com/original": json.dumps(db)}
    db["metadata"]["labels"] = {"checksum": LABEL_CANARY}
    cp.apply(manifest(db))
    setup(
        cp,
        ns,
        remote,
        SECRET_RULE,
        encryption={"ageKeySecretRef": {"name": "age-key"}, "generateWhenMissing": True},
    )
    path = secret_path(ns, "db")
    wait_for(lambda: path in remote.files(), what="encrypted Secret")
    assert "mirror/.sops.yaml" in remote.files()
    assert f"mirror/{ns}/core/secrets/db.yaml" not in remote.files()

    # The generated key: a Secret with a backup note, the only recipient.
    generated = cp.get_json("secret", "age-key", "-n", ns)
    assert "Back up this age key" in generated["metadata"]["annotations"]["kubescribe.io/backup"]
    key_file = base64.b64decode(generated["data"]["identity.agekey"]).decode()
    [identity] = parse_identities(key_file)
    wait_condition(
        cp, "gittarget", "mirror", ns, "EncryptionConfigured", "True", "EncryptionConfigured"
    )
    status = cp.get_json("gittarget", "mirror", "-n", ns)["status"]
    assert status["encryption"]["recipients"] == [recipient_of(identity)]
    assert recipient_of(identity) in remote.read("mirror/.sops.yaml")

    written = remote.read(path)
    plain = sops_decrypt(written, identity, tmp_path / "a")
    assert plain["data"] == {"password": b64(CANARY), "user": b64("app")}
    assert plain["metadata"]["annotations"] == db["metadata"]["annotations"]
    assert plain["metadata"]["labels"] == db["metadata"]["labels"]
    visible = yaml.safe_load(written)["metadata"]  # keys stay readable for reviews
    assert (list(visible["annotations"]), list(visible["labels"])) == (
        ["tool.example.com/original"],
        ["checksum"],
    )

    # An update re-encrypts only the value that changed.
    cp.kubectl(
        "patch", "secret", "db", "-n", ns, "-p", f'{{"stringData":{{"password":"{CANARY_2}"}}}}'
    )
    wait_for(
        lambda: enc_values(remote.read(path))["password"] != enc_values(written)["password"],
        what="re-encrypted password",
    )
    updated = remote.read(path)
    assert enc_values(updated)["user"] == enc_values(written)["user"]
    assert remote.log()[0]["message"] == f"UPDATE Secret {ns}/db"
    assert sops_decrypt(updated, identity, tmp_path / "b")["data"]["password"] == b64(CANARY_2)

    # A restart re-lists everything and changes nothing: no commit.
    first.stop()
    tip = remote.tip()
    second = operator()
    wait_for(
        lambda: "kubescribe_target_documents{target=" in second.metrics(),
        what="first write report after the restart",
    )
    cp.apply(manifest(string_secret("marker", ns, m="1")))
    wait_for(lambda: secret_path(ns, "marker") in remote.files(), what="marker")
    log = remote.log()
    assert log[1]["sha"] == tip  # the marker's commit is the only one since the restart
    changed = git("show", "--format=", "--name-only", log[0]["sha"], cwd=remote.path).split()
    assert changed == [secret_path(ns, "marker")]

    cp.kubectl("delete", "secret", "db", "-n", ns)
    wait_for(lambda: path not in remote.files(), what="deleted Secret file")
    assert remote.log()[0]["message"] == f"DELETE Secret {ns}/db"
    assert_never_in_plaintext(remote, [first, second], CANARY, CANARY_2, LABEL_CANARY)


@pytest.mark.parametrize("cursors", ["memory", "redis"])
def test_without_encryption_secrets_are_refused_and_the_rest_flows(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
    cursors: str,
    request: pytest.FixtureRequest,
) -> None:
    """With saved resume cursors (Redis) too: configuring encryption lists the Secrets again
    instead of resuming past the refused ones."""
    cp, ns = crds, namespace
    extra = []
    if cursors == "redis":
        extra.append(f"--redis-url={request.getfixturevalue('redis_server').url}")
    op = operator(*extra)
    cp.apply(manifest(string_secret("db", ns, password=CANARY), configmap("app", ns, {"k": "v"})))
    setup(cp, ns, remote, SECRET_RULE, CM_RULE)
    wait_for(lambda: f"mirror/{ns}/core/configmaps/app.yaml" in remote.files(), what="ConfigMap")
    missing = wait_condition(
        cp, "gittarget", "mirror", ns, "EncryptionConfigured", "False", "EncryptionMissing"
    )
    assert "spec.encryption is not set" in missing["message"]
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "False", "EncryptionMissing")
    wait_for(lambda: refused(op, "EncryptionMissing") >= 1, what="refusal metric")
    assert not [f for f in remote.files() if "/secrets/" in f]

    # Configuring encryption later writes what was refused (the Secret stream re-lists).
    cp.kubectl(
        "patch",
        "gittarget",
        "mirror",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec":{"encryption":{"ageKeySecretRef":{"name":"age-key"},"generateWhenMissing":true}}}',
    )
    wait_for(lambda: secret_path(ns, "db") in remote.files(), timeout=60, what="Secret written")
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "True", "Ready")
    generated = cp.get_json("secret", "age-key", "-n", ns)
    [identity] = parse_identities(base64.b64decode(generated["data"]["identity.agekey"]).decode())
    plain = sops_decrypt(remote.read(secret_path(ns, "db")), identity, tmp_path)
    assert plain["data"] == {"password": b64(CANARY)}
    assert_never_in_plaintext(remote, [op], CANARY)


def test_adding_a_recipient_reencrypts_existing_documents(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    alice, alice_recipient = generate_identity()
    bob, bob_recipient = generate_identity()
    op = encrypting(
        cp, ns, remote, operator, alice,
        string_secret("one", ns, token=CANARY), string_secret("two", ns, token=CANARY_2),
    )  # fmt: skip
    paths = [secret_path(ns, n) for n in ("one", "two", "age-key")]
    wait_for(lambda: set(paths) <= set(remote.files()), what="encrypted Secrets")
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "True", "Ready")
    before = {p: remote.read(p) for p in paths}
    commits = len(remote.log())

    cp.kubectl(
        "patch",
        "gittarget",
        "mirror",
        "-n",
        ns,
        "--type=merge",
        "-p",
        f'{{"spec":{{"encryption":{{"recipients":["{bob_recipient}"]}}}}}}',
    )
    wait_for(lambda: remote.log()[0]["message"].startswith("Re-encrypt"), what="re-encryption")
    log = remote.log()
    assert len(log) == commits + 1  # one commit for all of them
    assert log[0]["message"] == ("Re-encrypt 3 documents for 2 age recipients\n\nUpdate .sops.yaml")
    for i, path in enumerate(paths):
        after = remote.read(path)
        assert enc_values(after) != enc_values(before[path])  # a new data key for the new set
        assert sops_decrypt(after, bob, tmp_path / f"bob-{i}")["metadata"]["name"] in path
    assert sops_decrypt(remote.read(paths[0]), bob, tmp_path / "bob")["data"] == {
        "token": b64(CANARY)
    }
    assert sops_decrypt(remote.read(paths[1]), alice, tmp_path / "alice")["data"] == {
        "token": b64(CANARY_2)
    }
    assert bob_recipient in remote.read("mirror/.sops.yaml")

    def recipients() -> list[str]:
        status = cp.get_json("gittarget", "mirror", "-n", ns)["status"]
        return list(status.get("encryption", {}).get("recipients", []))

    wait_for(lambda: len(recipients()) == 2, what="status recipients")
    assert recipients() == [bob_recipient, alice_recipient]
    assert_never_in_plaintext(remote, [op], CANARY, CANARY_2)


def sops_encrypt(plain: dict[str, Any], recipient: str, workdir: Path) -> str:
    """Encrypt with the real sops binary to a public key, as a repo writer without the
    private key can."""
    assert SOPS is not None, "sops binary not found next to python"
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "plain.yaml"
    path.write_text(yaml.safe_dump(plain, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOPS_")}
    env.update(HOME=str(workdir))
    args = ["--age", recipient, "--encrypted-regex", "^(data|stringData)$", str(path)]
    done = subprocess.run(
        [SOPS, "--disable-version-check", "encrypt", *args],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def opens_any_value(data: str, key: bytes) -> bool:
    """Whether `key` (a data key) decrypts any value of a sops Secret file."""
    for name, value in enc_values(data).items():
        enc = _cipher.parse(value)
        assert enc is not None
        try:
            _cipher.decrypt(key, enc, f"data:{name}:")
            return True
        except InvalidTag:
            continue
    return False


def test_a_planted_file_never_chooses_the_data_key(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    identity, recipient = generate_identity()
    op = encrypting(cp, ns, remote, operator, identity, string_secret("db", ns, password=CANARY))
    path = secret_path(ns, "db")
    wait_for(lambda: path in remote.files(), what="encrypted Secret")

    # A repo writer with no private key plants a file for the operator's public recipient,
    # under a data key sops chose for it (read here with the identity; the writer knows it).
    fake = string_secret("db", ns)
    fake["data"] = {"password": b64("attacker-chosen")}
    del fake["stringData"]
    planted = sops_encrypt(fake, recipient, tmp_path / "attacker")
    their_key = sops_module._open(planted.encode(), load_identities([identity])).key
    assert opens_any_value(planted, their_key)
    remote.commit_foreign(path, planted, "Plant a file under a chosen data key")

    cp.kubectl(
        "patch", "secret", "db", "-n", ns, "-p", f'{{"stringData":{{"password":"{CANARY_2}"}}}}'
    )
    wait_for(lambda: remote.log()[0]["message"] == f"UPDATE Secret {ns}/db", what="update")
    written = remote.read(path)
    assert not opens_any_value(written, their_key)
    assert sops_decrypt(written, identity, tmp_path / "op")["data"] == {"password": b64(CANARY_2)}
    assert_never_in_plaintext(remote, [op], CANARY, CANARY_2)


def test_missing_key_secret_is_reported_until_it_exists(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    op = operator()
    cp.apply(manifest(string_secret("db", ns, password=CANARY), configmap("app", ns, {"k": "v"})))
    setup(cp, ns, remote, SECRET_RULE, CM_RULE, encryption={"ageKeySecretRef": {"name": "age-key"}})
    wait_for(lambda: f"mirror/{ns}/core/configmaps/app.yaml" in remote.files(), what="ConfigMap")
    notfound = wait_condition(
        cp, "gittarget", "mirror", ns, "EncryptionConfigured", "False", "SecretNotFound"
    )
    assert "age-key" in notfound["message"]
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "False", "SecretNotFound")
    wait_for(lambda: refused(op, "SecretNotFound") >= 1, what="refusal metric")

    cp.apply(manifest(key_secret("age-key", ns, "not an age key")))
    invalid = wait_condition(
        cp, "gittarget", "mirror", ns, "EncryptionConfigured", "False", "InvalidKey"
    )
    assert "team.agekey" in invalid["message"]
    assert "not an age key" not in invalid["message"]

    identity, _ = generate_identity()
    cp.apply(manifest(key_secret("age-key", ns, identity)))
    wait_for(lambda: secret_path(ns, "db") in remote.files(), timeout=60, what="Secret written")
    assert sops_decrypt(remote.read(secret_path(ns, "db")), identity, tmp_path)["data"] == {
        "password": b64(CANARY)
    }
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "True", "Ready")
    assert_never_in_plaintext(remote, [op], CANARY, identity)


def test_sensitive_type_paths_encrypt_only_those_values(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    identity, recipient = generate_identity()
    operator()
    cp.apply(
        manifest(
            configmap("app", ns, {"token": CANARY, "mode": "fast"}),
            configmap("plain", ns, {"k": "v"}),
        )
    )
    setup(
        cp,
        ns,
        remote,
        CM_RULE,
        encryption={
            "recipients": [recipient],
            "sensitiveTypes": [{"resource": "configmaps", "paths": ["data.token"]}],
        },
    )
    path = f"mirror/{ns}/core/configmaps/app.sops.yaml"
    wait_for(lambda: path in remote.files(), what="encrypted ConfigMap")
    written = yaml.safe_load(remote.read(path))
    assert written["data"]["mode"] == "fast"
    assert written["data"]["token"].startswith("ENC[AES256_GCM,")
    assert sops_decrypt(remote.read(path), identity, tmp_path)["data"]["token"] == CANARY
    assert f"mirror/{ns}/core/configmaps/plain.sops.yaml" in remote.files()
    configured = wait_condition(
        cp, "gittarget", "mirror", ns, "EncryptionConfigured", "True", "EncryptionConfigured"
    )
    assert "holds no age identity" in configured["message"]
    assert CANARY not in git("log", "-p", "--all", cwd=remote.path)

    # No longer sensitive: the type's streams re-list and its documents become plain again.
    cp.kubectl(
        "patch",
        "gittarget",
        "mirror",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec":{"encryption":{"sensitiveTypes":null}}}',
    )
    plain = f"mirror/{ns}/core/configmaps/app.yaml"
    wait_for(lambda: plain in remote.files() and path not in remote.files(), what="plain again")
    assert yaml.safe_load(remote.read(plain))["data"] == {"mode": "fast", "token": CANARY}


def test_secrets_db_and_db_sops_each_get_a_file_of_their_own(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    """`db.sops` would map to `db.sops.yaml`, the encrypted file of `db`: one never reached
    Git. The dot of a trailing `.sops` is escaped in file names."""
    cp, ns = crds, namespace
    identity, _ = generate_identity()
    op = encrypting(
        cp, ns, remote, operator, identity,
        string_secret("db", ns, password=CANARY), string_secret("db.sops", ns, password=CANARY_2),
    )  # fmt: skip
    paths = {"db": secret_path(ns, "db"), "db.sops": secret_path(ns, "db%2Esops")}
    wait_for(lambda: set(paths.values()) <= set(remote.files()), what="both encrypted Secrets")
    for name, path in paths.items():
        plain = sops_decrypt(remote.read(path), identity, tmp_path / name)
        assert plain["metadata"]["name"] == name
    assert sops_decrypt(remote.read(paths["db.sops"]), identity, tmp_path / "x")["data"] == {
        "password": b64(CANARY_2)
    }
    assert_never_in_plaintext(remote, [op], CANARY, CANARY_2)
