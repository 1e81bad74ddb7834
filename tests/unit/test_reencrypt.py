"""Encryption upkeep: documents encrypted for other recipients are re-encrypted (a failure is
refused once per key), `.sops.yaml` is kept as the renderer wants it, in one commit."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pygit2
import pytest
import structlog
import yaml

from kubescribe.api import conditions as c
from kubescribe.git.chain import CommitChain, read_file
from kubescribe.git.index import TargetIndex
from kubescribe.git.plan import Plan
from kubescribe.git.records import Refusal
from kubescribe.git.reencrypt import Recipients, reencrypt, upkeep_commit, upkeep_message
from kubescribe.git.tree import edit_tree
from kubescribe.mirror.identity import Identity, ResourceType
from tests.builders import COMMITTER, SECRETS, ident

WANTED = ("age1new", "age1other")


def secret(name: str, *recipients: str) -> bytes:
    doc = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "ns1"},
        "data": {"k": "ENC[...]"},
        "sops": {"age": list(recipients)},
    }
    return yaml.safe_dump(doc).encode()


class Renderer:
    """Encrypting as far as the upkeep asks: recipients read from a `sops.age` list."""

    recipients = WANTED

    def __init__(self, broken: frozenset[str] = frozenset()) -> None:
        self.broken = broken

    def encrypted(self, rtype: ResourceType) -> bool:
        return rtype == SECRETS

    def render(
        self, identity: Identity, rtype: ResourceType, doc: Mapping[str, Any], old: bytes | None
    ) -> bytes:
        raise AssertionError("the upkeep renders nothing")

    def sops_config(self, current: bytes | None) -> bytes | None:
        return b"creation_rules: [{age: age1new,age1other}]\n"

    def recipients_of(self, data: bytes) -> frozenset[str] | None:
        return frozenset(yaml.safe_load(data)["sops"]["age"])

    def rekey(self, identity: Identity, data: bytes) -> bytes:
        if identity.name in self.broken:
            raise ValueError("no key to decrypt with")
        return secret(identity.name, *WANTED)


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "store.git"), bare=True)


def chain_on(repo: pygit2.Repository, files: dict[str, bytes]) -> CommitChain:
    tree = edit_tree(repo, None, {p: repo.create_blob(d) for p, d in files.items()})
    sig = pygit2.Signature("someone", "someone@example.invalid")
    return CommitChain(repo, COMMITTER, repo.create_commit(None, sig, sig, "base", tree, []))


FILES = {
    "f/ns1/old.sops.yaml": secret("old", "age1gone"),
    "f/ns1/current.sops.yaml": secret("current", *WANTED),
    "f/ns1/plain.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\n",
}


def test_documents_for_other_recipients_are_re_encrypted_in_one_commit(
    repo: pygit2.Repository,
) -> None:
    chain = chain_on(repo, FILES)
    plan = Plan(TargetIndex.build(repo, chain.tree, "f"))
    known: Recipients = {}
    refused: list[Refusal] = []
    reencrypt(chain, plan, Renderer(), "key", known, set(), refused.append)
    assert list(plan.writes) == [ident("old", rtype=SECRETS)]
    assert refused == []
    text = upkeep_commit(chain, plan, Renderer(), "f", structlog.get_logger())
    assert text == "Re-encrypt 1 document for 2 age recipients\n\nWrite .sops.yaml"
    assert read_file(repo, chain.tree, "f/ns1/old.sops.yaml") == secret("old", *WANTED)
    assert read_file(repo, chain.tree, "f/.sops.yaml") is not None
    # in step now: nothing more to do
    again = Plan(TargetIndex.build(repo, chain.tree, "f"))
    reencrypt(chain, again, Renderer(), "key", known, set(), refused.append)
    assert upkeep_commit(chain, again, Renderer(), "f", structlog.get_logger()) is None


def test_a_document_that_cannot_be_re_encrypted_is_refused_once_per_key(
    repo: pygit2.Repository,
) -> None:
    chain = chain_on(repo, FILES)
    failed: set[tuple[pygit2.Oid, Any]] = set()
    refused: list[Refusal] = []
    for _ in range(2):
        plan = Plan(TargetIndex.build(repo, chain.tree, "f"))
        reencrypt(chain, plan, Renderer(frozenset({"old"})), "key", {}, failed, refused.append)
        assert plan.writes == {}
    assert refused == [Refusal(ident("old", rtype=SECRETS), c.REENCRYPT_FAILED, "ValueError")]
    plan = Plan(TargetIndex.build(repo, chain.tree, "f"))
    reencrypt(chain, plan, Renderer(frozenset({"old"})), "new key", {}, failed, refused.append)
    assert len(refused) == 2  # told again under another key


@pytest.mark.parametrize(
    ("rekeyed", "recipients", "written", "existed", "text"),
    [
        (0, 1, True, False, "Write .sops.yaml for 1 age recipient"),
        (0, 2, True, True, "Update .sops.yaml for 2 age recipients"),
        (2, 1, False, True, "Re-encrypt 2 documents for 1 age recipient"),
        (1, 3, True, True, "Re-encrypt 1 document for 3 age recipients\n\nUpdate .sops.yaml"),
    ],
)
def test_the_upkeep_message_says_what_changed(
    rekeyed: int, recipients: int, written: bool, existed: bool, text: str
) -> None:
    assert upkeep_message(rekeyed, recipients, config_written=written, existed=existed) == text
