"""The discovery grace and what a settled removal tells the targets (controller/discovered)."""

from __future__ import annotations

from kubescribe.controller.discovered import DiscoveredTypes
from kubescribe.controller.streams import StreamSpec
from kubescribe.kube.discovery import Discovered
from kubescribe.mirror.changes import Operation, TargetKey
from kubescribe.mirror.identity import ResourceType

V1 = ResourceType("ex.io", "v1", "gadgets", "Gadget", True)
V2 = ResourceType("ex.io", "v2", "gadgets", "Gadget", True)
T = TargetKey("ns", "mirror")


def stream(rtype: ResourceType, namespace: str = "ns", cluster: str = "") -> StreamSpec:
    return StreamSpec(T, rtype, namespace, (None,), frozenset(Operation), cluster=cluster)


def test_a_type_is_kept_through_the_grace_and_gone_after_it() -> None:
    types = DiscoveredTypes(grace=10)
    assert not types.refresh([Discovered(V1, True)], now=0)
    assert types.refresh([], now=5)  # missing, within the grace: check again later
    assert [d.rtype for d in types.items()] == [V1]
    assert not types.refresh([], now=11)
    assert types.items() == []
    assert types.gone == {("ex.io", "v1", "gadgets")}
    types.refresh([Discovered(V1, True)], now=12)  # served again: no longer gone
    assert types.gone == set()


def test_a_gone_type_becomes_one_empty_snapshot_per_target_and_scope() -> None:
    types = DiscoveredTypes(grace=1)
    types.refresh([Discovered(V1, True)], now=0)
    types.refresh([], now=2)
    sweeps = types.sweeps([stream(V1), stream(V1), stream(V1, "other")], [], now=3)
    assert [(s.target, s.rtype, s.namespace, len(s.documents)) for s in sweeps] == [
        (T, V1, "ns", 0),
        (T, V1, "other", 0),
    ]


def test_no_sweep_while_another_version_feeds_the_target_or_for_a_remote_cluster() -> None:
    types = DiscoveredTypes(grace=1)
    types.refresh([Discovered(V1, True), Discovered(V2, False)], now=0)
    types.refresh([Discovered(V2, True)], now=2)
    assert types.sweeps([stream(V1)], [stream(V2)], now=3) == []
    assert types.sweeps([stream(V1, cluster="east")], [], now=3) == []
    assert types.sweeps([stream(V2)], [], now=3) == []  # stopped, but still served
