"""Hostile files in a real repository: a kept file with an alias bomb and files too large to
read cost the operator nothing, are reported on their target, and mirroring goes on."""

from __future__ import annotations

from collections.abc import Callable

import yaml

from kubescribe import metrics
from kubescribe.mirror import boundedyaml
from kubescribe.mirror.changes import Operation
from kubescribe.mirror.yamlfmt import dump_yaml, order_document
from kubescribe_devenv.gitremote import BareRemote
from tests.builders import FOLDER, TARGET, document, path_of, read_doc, upsert
from tests.support import WorkerHarness

LEVELS = 9  # 9**9 = 387,420,489 nodes: minutes and GiBs once expanded


def laughs(levels: int) -> str:
    lines = ["  l0: &l0 [lol]"]
    lines += [f"  l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


KEPT = f"""\
# kept by hand
apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  namespace: ns1
data:
  k: v
extra:
{laughs(LEVELS)}"""


def oversized_files() -> float | None:
    return metrics.REGISTRY.get_sample_value("kubescribe_oversized_files", {"target": str(TARGET)})


def refused_too_large() -> float:
    value = metrics.REGISTRY.get_sample_value(
        "kubescribe_refused_files_total", {"reason": boundedyaml.TOO_LARGE}
    )
    return value or 0.0


async def test_a_kept_file_with_an_alias_bomb_gets_the_canonical_rendering(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    path = f"{FOLDER}/team/a.yaml"
    remote.commit_foreign(path, KEPT, "a kept file with a bomb inside")
    h = make()
    await h.settle(upsert("a", op=Operation.UPDATE, k="w"))
    expected = dump_yaml(order_document(document("a", k="w"))).encode()
    assert remote.read(path).encode() == expected  # found by identity, rendered afresh
    assert h.last().failing == []


async def test_files_too_large_to_read_are_reported_and_mirroring_goes_on(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    large = f"{FOLDER}/team/large.yaml"
    remote.commit_foreign(
        large,
        yaml.safe_dump(document("big", k="x" * boundedyaml.MAX_FILE_BYTES)),
        "a file larger than the cap",
    )
    nodes = f"{FOLDER}/team/nodes.yaml"
    remote.commit_foreign(
        nodes, "[" + ",".join(["a"] * (boundedyaml.MAX_NODES + 1)) + "]\n", "many nodes"
    )
    refused_before = refused_too_large()
    h = make()
    await h.settle(upsert("big", k="live"), upsert("b", k="v"))
    # the large file's object is not found there: it is written at its own path
    assert read_doc(remote, path_of("big"))["data"] == {"k": "live"}
    assert read_doc(remote, path_of("b"))["data"] == {"k": "v"}
    assert len(remote.read(large)) > boundedyaml.MAX_FILE_BYTES  # left alone
    failing = h.last().failing
    assert [(i.kind, i.name, reason) for i, reason, _ in failing] == [
        ("File", large, "FileTooLarge"),
        ("File", nodes, "FileTooLarge"),
    ]
    assert "more than 250000 YAML nodes" in failing[1][2]
    assert oversized_files() == 2
    assert refused_too_large() == refused_before + 1

    await h.settle(upsert("b", op=Operation.UPDATE, k="w"))
    assert read_doc(remote, path_of("b"))["data"] == {"k": "w"}
    assert [i.name for i, _, _ in h.last().failing] == [large, nodes]
    assert refused_too_large() == refused_before + 1  # the next build reads no file again
