"""Bounds on YAML from Git: alias bombs, deep nesting and large files are refused before
anything is composed, and files people keep that hold them get the canonical rendering."""

from __future__ import annotations

import pytest
import yaml

from kubescribe.mirror import boundedyaml, docedit
from kubescribe.mirror.boundedyaml import RefusedYaml, check
from kubescribe.mirror.identity import Identity
from kubescribe.mirror.yamlfmt import dump_yaml, order_document


def laughs(levels: int, width: int = 9) -> bytes:
    """The "billion laughs": `width ** levels` nodes in a few hundred bytes."""
    lines = ["a0: &a0 [lol]"]
    for i in range(1, levels + 1):
        refs = ",".join([f"*a{i - 1}"] * width)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


def configmap(**data: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "app", "namespace": "ns"},
        "data": data,
    }


def refusal(data: bytes, **bounds: object) -> str:
    with pytest.raises(RefusedYaml) as refused:
        check(data, **bounds)  # type: ignore[arg-type]
    return refused.value.reason


def test_an_alias_bomb_is_refused_by_its_expanded_size() -> None:
    bomb = laughs(9)  # 387,420,489 nodes in 0.5 KiB
    assert len(bomb) < 600
    assert refusal(bomb) == boundedyaml.TOO_MANY_NODES
    check(laughs(3))  # a few aliases are fine where they are allowed


def test_aliases_are_refused_outright_where_asked() -> None:
    assert refusal(b"a: &x 1\nb: *x\n", aliases=False) == boundedyaml.ALIASES
    check(b"a: 1\nb: 2\n", aliases=False)


def test_nesting_past_the_depth_cap_is_refused() -> None:
    def nested(depth: int) -> bytes:
        return b"[" * depth + b"]" * depth

    check(nested(boundedyaml.MAX_DEPTH))
    assert refusal(nested(boundedyaml.MAX_DEPTH + 1)) == boundedyaml.TOO_DEEP
    assert refusal(nested(900)) == boundedyaml.TOO_DEEP  # (libyaml itself stops at 1000)


def test_files_past_the_size_or_node_cap_are_refused() -> None:
    big = b"k: " + b"x" * boundedyaml.MAX_FILE_BYTES + b"\n"
    assert refusal(big) == boundedyaml.TOO_LARGE
    check(big, max_bytes=None)
    many = ("[" + ",".join(["a"] * (boundedyaml.MAX_NODES + 1)) + "]").encode()
    assert refusal(many) == boundedyaml.TOO_MANY_NODES


def test_ordinary_manifests_pass_and_invalid_yaml_fails_as_a_load_would() -> None:
    check(dump_yaml(configmap(**{f"k{i}": "v" for i in range(20_000)})).encode())
    with pytest.raises(yaml.YAMLError):
        check(b"a: [unclosed\n")


def test_a_kept_file_with_an_alias_bomb_is_rendered_afresh() -> None:
    previous = b"# kept by hand\n" + dump_yaml(configmap(k="v")).encode() + laughs(7)
    canonical = dump_yaml(order_document(configmap(k="w"))).encode()
    assert docedit.adopt(previous, configmap(k="w"), canonical) == canonical


def test_a_kept_file_with_any_alias_is_rendered_afresh() -> None:
    previous = b"""\
# kept by hand
apiVersion: v1
kind: ConfigMap
metadata: {name: app, namespace: ns}
data:
  k: &value v
  copy: *value
"""
    document = configmap(k="w", copy="v")
    canonical = dump_yaml(order_document(document)).encode()
    assert docedit.adopt(previous, document, canonical) == canonical


def test_a_bomb_in_a_multi_document_file_is_kept_but_never_read() -> None:
    data = dump_yaml(configmap(k="v")).encode() + b"---\n" + laughs(9)
    parts = docedit.split(data)
    assert [p.identity for p in parts] == [Identity("", "ConfigMap", "ns", "app"), None]


def test_aliases_count_as_one_node_where_only_composing_costs() -> None:
    check(laughs(9), expanded=False)  # a loader shares the aliased node: cheap to compose
    many = ("[" + ",".join(["a"] * (boundedyaml.MAX_NODES + 1)) + "]").encode()
    assert refusal(many, expanded=False) == boundedyaml.TOO_MANY_NODES
