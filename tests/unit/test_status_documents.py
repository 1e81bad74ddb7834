"""The DocumentsWritten condition of a GitTarget and what it does to Ready."""

from __future__ import annotations

from kubescribe.controller.status import documents_condition, kstatus
from kubescribe.git.records import Refusal
from kubescribe.mirror.identity import Identity

BAD = Identity("rbac.authorization.k8s.io", "ClusterRole", "", ".git")
CONFLICT = Identity("", "ConfigMap", "ns1", "a")


def test_every_document_written_is_true() -> None:
    cond = documents_condition([])
    assert (cond.type, cond.status) == ("DocumentsWritten", "True")
    assert kstatus([cond], progressing=None)[0].status == "True"


def test_an_invalid_path_makes_the_target_not_ready_and_stalled() -> None:
    cond = documents_condition(
        [
            Refusal(BAD, "InvalidPath", ".git/x.yaml: Git refuses"),
            Refusal(CONFLICT, "PathConflict", "taken"),
        ]
    )
    assert (cond.status, cond.reason) == ("False", "InvalidPath")
    assert cond.message == (
        "2 document(s) not written: ClusterRole .git: .git/x.yaml: Git refuses;"
        " ConfigMap ns1/a: taken"
    )
    ready, stalled, _ = kstatus([cond], progressing=None)
    assert (ready.status, ready.reason) == ("False", "InvalidPath")
    assert stalled.status == "True"


def test_the_message_counts_and_names_the_first_three() -> None:
    failing = [
        Refusal(
            Identity("", "ConfigMap", "ns1", f"c{i}"), "DuplicateIdentity", f"x/c{i}.yaml holds it"
        )
        for i in range(5)
    ]
    cond = documents_condition(failing)
    assert (cond.status, cond.reason) == ("False", "DuplicateIdentity")
    assert cond.message == (
        "5 document(s) not written: ConfigMap ns1/c0: x/c0.yaml holds it;"
        " ConfigMap ns1/c1: x/c1.yaml holds it; ConfigMap ns1/c2: x/c2.yaml holds it"
        " (and 2 more)"
    )
    assert kstatus([cond], progressing=None)[0].status == "False"
