"""Editing files people keep: documents of multi-document files, minimal diffs."""

from __future__ import annotations

from typing import Any

from kubescribe.mirror import docedit
from kubescribe.mirror.identity import Identity
from kubescribe.mirror.yamlfmt import dump_yaml, order_document

A = Identity("", "ConfigMap", "ns", "a")
B = Identity("", "ConfigMap", "ns", "b")

FILE = b"""\
# header comment
apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  namespace: ns
data:
  k: "1"
--- # b follows
apiVersion: v1
kind: ConfigMap
metadata: {name: b, namespace: ns}
...
"""


def cm(name: str, **data: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns"},
        "data": data,
    }


def test_split_finds_each_document_and_its_identity() -> None:
    parts = docedit.split(FILE)
    assert [p.identity for p in parts] == [A, B]
    assert b"".join(p.text for p in parts) == FILE
    assert docedit.is_multi(FILE)
    assert not docedit.is_multi(b"---\n# only a comment\n---\napiVersion: v1\n")


def test_replace_and_remove_leave_other_documents_byte_identical() -> None:
    edited = docedit.replace(FILE, A, b"apiVersion: v1\nkind: ConfigMap\n")
    assert edited.endswith(FILE[FILE.index(b"--- # b") :])
    removed = docedit.remove(FILE, B)
    assert removed == FILE[: FILE.index(b"--- # b")]
    assert docedit.remove(docedit.remove(FILE, B) or b"", A) is None


def test_adopt_keeps_text_whose_content_matches() -> None:
    body = docedit.body_of(FILE, A)
    assert body is not None
    assert docedit.adopt(body, cm("a", k="1"), b"canonical") == body


def test_adopt_renders_the_operators_own_files_afresh() -> None:
    own = dump_yaml(order_document(cm("a", k="1"))).encode()
    new = dump_yaml(order_document(cm("a", k="2"))).encode()
    assert docedit.adopt(own, cm("a", k="2"), new) == new


def test_edit_changes_only_changed_values_keeping_style() -> None:
    text = b"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web   # the web tier
spec:
  replicas: 2
  template:
    spec:
      containers:
        - name: web
          image: "nginx:1.27"  # pinned
          args: ['a', 'b']
"""
    new = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "template": {
                "spec": {"containers": [{"name": "web", "image": "nginx:1.28", "args": ["a", "b"]}]}
            },
        },
    }
    out = docedit.adopt(text, new, b"canonical")
    assert out == text.replace(b"replicas: 2", b"replicas: 3").replace(b"1.27", b"1.28")


def test_new_ambiguous_strings_are_quoted() -> None:
    text = (
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\n"
        b"data:\n  k: x  # hi\n"
    )
    out = docedit.adopt(text, cm("a", k="x", on="yes", n="1e3"), b"canonical")
    assert out == text + b"  'n': '1e3'\n  'on': 'yes'\n"
