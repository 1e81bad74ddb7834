"""Decoded memory of one audit request at the receiver's default caps.

For each hostile body shape, the largest body the receiver would parse (at most the body cap,
`json_memory_bound` within the decoded budget) is decoded under tracemalloc. Prints one JSON
object per shape: body size, the bound, the measured peak, the decode time.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable

import click

from kubescribe.attribution.decode import decode_event_list, json_memory_bound
from kubescribe.defaults import DEFAULT_MAX_BODY, DEFAULT_MAX_EVENTS
from kubescribe.server.audit import DECODED_BUDGET

MiB = 1024 * 1024


def _wrap(inner: bytes) -> bytes:
    return b'{"kind":"EventList","items":[{"x":[' + inner + b"]}]}"


def _event(i: int) -> dict[str, object]:
    return {
        "stage": "ResponseComplete",
        "verb": "update",
        "user": {"username": f"user-{i}", "groups": ["system:authenticated"]},
        "objectRef": {"resource": "configmaps", "namespace": "ns", "name": f"cm-{i}"},
        "responseStatus": {"code": 200},
        "responseObject": {
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "uid": f"u-{i}", "resourceVersion": str(i)},
            "data": {"k": "v" * 64},
        },
        "requestReceivedTimestamp": "2026-01-02T03:04:05.000000Z",
        "stageTimestamp": "2026-01-02T03:04:05.100000Z",
    }


SHAPES: dict[str, Callable[[int], bytes]] = {
    "empty_dicts": lambda n: _wrap(b",".join([b"{}"] * n)),
    "empty_lists": lambda n: _wrap(b",".join([b"[]"] * n)),
    "short_strings": lambda n: _wrap(b",".join([b'"ab"'] * n)),
    "floats": lambda n: _wrap(b",".join([b"1.5"] * n)),
    "dict_keys": lambda n: _wrap(b"{" + b",".join(b'"k%d":0' % i for i in range(n)) + b"}"),
    "ucs4_string": lambda n: _wrap(json.dumps("\U0001f600" + "a" * n, ensure_ascii=False).encode()),
    "ascii_string": lambda n: _wrap(b'"' + b"a" * n + b'"'),
    "events": lambda n: json.dumps(
        {"kind": "EventList", "items": [_event(i) for i in range(min(n, DEFAULT_MAX_EVENTS))]}
    ).encode(),
}


def _largest(make: Callable[[int], bytes], max_body: int, budget: int) -> bytes:
    """The largest body of this shape that passes the cap and the budget (binary search)."""
    lo, hi = 1, max_body
    while lo < hi:
        mid = (lo + hi + 1) // 2
        body = make(mid)
        if len(body) <= max_body and json_memory_bound(body) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return make(lo)


@click.command()
@click.option("--max-body", default=DEFAULT_MAX_BODY, show_default=True)
@click.option("--budget", default=DECODED_BUDGET, show_default=True)
def main(max_body: int, budget: int) -> None:
    for name, make in SHAPES.items():
        body = _largest(make, max_body, budget)
        tracemalloc.start()
        started = time.perf_counter()
        decode_event_list(body, DEFAULT_MAX_EVENTS)
        seconds = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        result = {
            "shape": name,
            "body_mib": round(len(body) / MiB, 2),
            "bound_mib": round(json_memory_bound(body) / MiB, 1),
            "peak_mib": round(peak / MiB, 1),
            "seconds_under_tracemalloc": round(seconds, 2),
        }
        click.echo(json.dumps(result))


if __name__ == "__main__":
    main()
