"""The branch worker with the SOPS renderer: `.sops.yaml` and re-encryption when a target's
age recipients change, against a real bare repository read back with `git`."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from kubescribe.api.conditions import REENCRYPT_FAILED
from kubescribe.controller.encryption import SopsRenderer
from kubescribe.mirror.changes import Operation, PruneMode
from kubescribe.secrets.age import generate_identity
from kubescribe.secrets.sops import NoMatchingKeyError, decrypt_document, inspect_document
from kubescribe_devenv.gitremote import BareRemote, git
from tests.builders import FOLDER, SECRETS, delete, ident, path_of, target, upsert
from tests.support import WorkerHarness, until

ALICE = generate_identity()
BOB = generate_identity()
CAROL = generate_identity()
CONFIG = f"{FOLDER}/.sops.yaml"


def sops(*keys: tuple[str, str], identities: bool = True) -> SopsRenderer:
    return SopsRenderer(
        recipients=[r for _, r in keys],
        identities=[i for i, _ in keys] if identities else [],
    )


def secret_path(name: str) -> str:
    return path_of(name, rtype=SECRETS).removesuffix(".yaml") + ".sops.yaml"


def values(remote: BareRemote, name: str) -> dict[str, Any]:
    return dict(yaml.safe_load(remote.read(secret_path(name)))["data"])


def history(remote: BareRemote) -> str:
    return git("log", "-p", "--all", cwd=remote.path)


async def test_secrets_are_encrypted_with_a_sops_config_and_stay_stable(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(target(renderer=sops(ALICE)))
    await h.settle(upsert("db", rtype=SECRETS, password="aHVudGVyMg=="))
    assert set(remote.files()) == {CONFIG, secret_path("db")}
    messages = [c["message"] for c in remote.log()[:2]]
    assert messages == ["CREATE Secret ns1/db", "Write .sops.yaml for 1 age recipient"]
    data = remote.read(secret_path("db")).encode()
    assert decrypt_document(data, [ALICE[0]])["data"] == {"password": "aHVudGVyMg=="}
    assert "aHVudGVyMg==" not in history(remote)
    tip = remote.tip()
    await h.settle(upsert("db", rtype=SECRETS, op=Operation.UPDATE, password="aHVudGVyMg=="))
    assert remote.tip() == tip  # same plaintext: same bytes, no commit


async def test_a_recipient_change_reencrypts_every_document_in_one_commit(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(target(PruneMode.NEVER, renderer=sops(ALICE)))
    await h.settle(
        upsert("a", rtype=SECRETS, k="MQ=="),
        upsert("b", rtype=SECRETS, k="Mg=="),
        upsert("plain", k="v"),
    )
    await h.settle(delete("b", rtype=SECRETS))  # retained: still in Git, gone from the cluster
    before = {name: values(remote, name) for name in ("a", "b")}
    commits = len(remote.log())

    with_bob = SopsRenderer(recipients=[ALICE[1], BOB[1]], identities=[ALICE[0]])
    h.worker.configure([target(PruneMode.NEVER, renderer=with_bob)])  # no new item
    await until(lambda: len(remote.log()) > commits, "re-encryption commit")
    log = remote.log()
    assert len(log) == commits + 1
    assert log[0]["message"] == ("Re-encrypt 2 documents for 2 age recipients\n\nUpdate .sops.yaml")
    for name in ("a", "b"):
        data = remote.read(secret_path(name)).encode()
        assert set(inspect_document(data).recipients) == {ALICE[1], BOB[1]}
        assert decrypt_document(data, [BOB[0]])["metadata"]["name"] == name
        assert values(remote, name) != before[name]  # a new data key for the new set
    assert BOB[1] in remote.read(CONFIG)
    assert path_of("plain") in remote.files()

    # Removing one rotates the data key as well: every value is encrypted again.
    only_alice = SopsRenderer(recipients=[ALICE[1]], identities=[ALICE[0]])
    h.worker.configure([target(PruneMode.NEVER, renderer=only_alice)])
    await until(lambda: len(remote.log()) > commits + 1, "second re-encryption")
    assert remote.log()[0]["message"].startswith("Re-encrypt 2 documents for 1 age recipient\n")
    data = remote.read(secret_path("a")).encode()
    assert inspect_document(data).recipients == (ALICE[1],)
    assert values(remote, "a")["k"] != before["a"]["k"]
    assert decrypt_document(data, [ALICE[0]])["data"] == {"k": "MQ=="}
    with pytest.raises(NoMatchingKeyError):
        decrypt_document(data, [BOB[0]])


async def test_files_it_cannot_open_are_reported_once_and_left_alone(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(target(renderer=sops(CAROL)))
    await h.settle(upsert("theirs", rtype=SECRETS, k="MQ=="))
    carols = remote.read(secret_path("theirs"))
    await h.worker.stop(timeout=5)

    # Another operator holding only ALICE's key takes over and adds BOB.
    h2 = make(target(renderer=sops(ALICE, BOB)), cache="other")
    await until(lambda: any(r.refused for r in h2.reports), "refusal report")
    [(identity, reason, message)] = [r for rep in h2.reports for r in rep.refused]
    assert (identity, reason) == (ident("theirs", rtype=SECRETS), REENCRYPT_FAILED)
    assert "not re-encrypted" in message
    assert remote.read(secret_path("theirs")) == carols
    await h2.settle(upsert("mine", rtype=SECRETS, k="Mg=="))
    assert not h2.last().refused  # not retried for the same file and recipients
    assert remote.read(secret_path("theirs")) == carols


async def test_a_sops_config_of_ones_own_is_left_alone(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    own = "creation_rules:\n- age: age1example\n"
    remote.commit_foreign(CONFIG, own, "My own sops rules")
    h = make(target(renderer=sops(ALICE, identities=False)))
    await h.settle(upsert("db", rtype=SECRETS, k=base64.b64encode(b"x").decode()))
    assert remote.read(CONFIG) == own
    assert remote.log()[0]["message"] == "CREATE Secret ns1/db"


async def test_sensitive_types_are_refused_without_recipients_and_others_written(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(target(renderer=SopsRenderer()))
    await h.settle(upsert("db", rtype=SECRETS, k="c2VjcmV0"), upsert("cm", k="v"))
    assert set(remote.files()) == {path_of("cm")}  # no .sops.yaml either
    assert [(r[0], r[1]) for r in h.last().refused] == [
        (ident("db", rtype=SECRETS), "EncryptionMissing")
    ]
    assert "c2VjcmV0" not in history(remote)
