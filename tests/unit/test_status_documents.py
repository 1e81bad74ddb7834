"""The DocumentsWritten condition of a GitTarget and what it does to Ready."""

from __future__ import annotations

from kubescribe.controller.status import documents_condition, kstatus
from kubescribe.mirror.identity import Identity

BAD = Identity("rbac.authorization.k8s.io", "ClusterRole", "", ".git")
CONFLICT = Identity("", "ConfigMap", "ns1", "a")


def test_every_document_written_is_true() -> None:
    cond = documents_condition([])
    assert (cond.type, cond.status) == ("DocumentsWritten", "True")
    assert kstatus([cond], progressing=None)[0].status == "True"


def test_an_invalid_path_makes_the_target_not_ready_and_stalled() -> None:
    cond = documents_condition(
        [(BAD, "InvalidPath", ".git/x.yaml: Git refuses"), (CONFLICT, "PathConflict", "taken")]
    )
    assert (cond.status, cond.reason) == ("False", "InvalidPath")
    assert cond.message == (
        "2 document(s) not written: ClusterRole .git: .git/x.yaml: Git refuses (and 1 more)"
    )
    ready, stalled, _ = kstatus([cond], progressing=None)
    assert (ready.status, ready.reason) == ("False", "InvalidPath")
    assert stalled.status == "True"
