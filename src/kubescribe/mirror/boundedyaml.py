"""Bounds on YAML read from Git, checked on the parser's events before anything is composed.

Whoever can push chooses these bytes. Composing YAML costs some 330 bytes of memory per node
(a MiB of `[a,a,…]` is 160 MiB), nesting recurses as deep as the text goes, and an alias makes
one node reachable many times: half a KiB can stand for billions of nodes that a comparison or
a re-emit then walks. `check` reads the event stream only (constant memory) and refuses a file
that is too large, too deep, or too big once its aliases are expanded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import yaml

# Above any object the API server stores (etcd holds 1.5 MiB; sops adds a third).
MAX_FILE_BYTES: Final = 4 << 20
# Nodes once aliases are expanded: a large CRD holds tens of thousands; the cap bounds a
# parse to about 80 MiB.
MAX_NODES: Final = 250_000
MAX_DEPTH: Final = 200  # nested maps and lists; the walks over a parsed tree recurse

# Why a file was refused, as the `reason` label of `kubescribe_refused_files_total`.
TOO_LARGE: Final = "too_large"
TOO_MANY_NODES: Final = "too_many_nodes"
TOO_DEEP: Final = "too_deep"
ALIASES: Final = "aliases"


class RefusedYaml(Exception):
    """The YAML exceeds a bound; `reason` is one of the constants above. Not a ValueError,
    so code that treats invalid YAML as "not a document" does not swallow it unawares."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _check_size(data: bytes | str, max_bytes: int | None) -> None:
    size = len(data.encode() if isinstance(data, str) else data)
    if max_bytes is not None and size > max_bytes:
        raise RefusedYaml(TOO_LARGE, f"{size} bytes, more than {max_bytes}")


def _close(open_nodes: list[int], open_anchors: list[str | None], anchored: dict[str, int]) -> None:
    """A collection ends: its expanded size goes to its anchor and to its parent."""
    nodes = open_nodes.pop()
    anchor = open_anchors.pop()
    if anchor is not None:
        anchored[anchor] = nodes
    if open_nodes:
        open_nodes[-1] += nodes


def check(
    data: bytes | str,
    *,
    max_bytes: int | None = MAX_FILE_BYTES,
    max_nodes: int = MAX_NODES,
    max_depth: int = MAX_DEPTH,
    aliases: bool = True,
    expanded: bool = True,
) -> None:
    """Raise `RefusedYaml` if `data` is larger than `max_bytes` (None: no cap), holds more
    than `max_nodes` nodes, nests deeper than `max_depth`, or holds any alias when `aliases`
    is False. Nodes are counted with aliases `expanded` (what a walk over the parsed tree
    visits); otherwise an alias is one node (what composing costs: a loader shares the node).
    Invalid YAML raises `yaml.YAMLError` as a load would."""
    _check_size(data, max_bytes)
    open_nodes: list[int] = []  # expanded size so far of each open collection
    open_anchors: list[str | None] = []
    anchored: dict[str, int] = {}  # expanded size of each anchored node
    total = 0
    events: Iterator[Any] = yaml.parse(data, Loader=yaml.CSafeLoader)  # node events: `anchor`
    for event in events:
        kind = type(event)  # `is` tests: this loop runs once per scalar of every file read
        if kind is yaml.ScalarEvent:
            nodes = 1
            if event.anchor is not None:
                anchored[event.anchor] = 1
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            if len(open_nodes) >= max_depth:
                raise RefusedYaml(TOO_DEEP, f"nested deeper than {max_depth} levels")
            open_nodes.append(0)
            open_anchors.append(event.anchor)
            nodes = 1
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            _close(open_nodes, open_anchors, anchored)
            continue  # its nodes were counted in `total` as they came
        elif kind is yaml.AliasEvent:
            if not aliases:
                raise RefusedYaml(ALIASES, "YAML aliases are not supported here")
            nodes = anchored.get(event.anchor or "", 1) if expanded else 1
        else:
            continue  # stream and document events
        total += nodes
        if total > max_nodes:
            raise RefusedYaml(TOO_MANY_NODES, f"more than {max_nodes} YAML nodes")
        if open_nodes:
            open_nodes[-1] += nodes
