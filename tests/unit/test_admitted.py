"""Admission facts: keyed by object and content (deletes by uid), joined with watch events."""

from __future__ import annotations

from typing import Any

import pytest

from kubescribe.attribution.admitted import AdmittedAuthors, admitted_facts
from kubescribe.attribution.resolver import AuditAuthorResolver
from kubescribe.mirror.authors import ObjectEvent
from kubescribe.mirror.digest import content_digest
from kubescribe.store.memory import MemoryFactStore

ROUTE = "@admission"


def cm(value: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "ns", **meta},
        "data": {"v": value},
    }


def review(user: str, operation: str, obj: dict[str, Any] | None, old: Any = None) -> Any:
    return {
        "uid": "r1",
        "operation": operation,
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "namespace": "ns",
        "name": "x",
        "userInfo": {"username": user},
        "object": obj,
        "oldObject": old,
    }


def event(value: str, operation: str = "UPDATE", uid: str = "") -> ObjectEvent:
    stored = cm(value, uid="u1", resourceVersion="9", managedFields=[{"manager": "kubectl"}])
    return ObjectEvent(
        uid=uid,
        resource_version="9",
        group="",
        resource="configmaps",
        namespace="ns",
        name="x",
        operation=operation,
        digest=content_digest(stored) if operation != "DELETE" else "",
    )


async def store_of(*reviews: tuple[Any, float]) -> MemoryFactStore:
    store = MemoryFactStore()
    for req, at in reviews:
        await store.add(ROUTE, admitted_facts(req, at))
    return store


async def test_the_stored_version_matches_only_the_write_with_its_content() -> None:
    store = await store_of(
        (review("alice", "UPDATE", cm("refused", annotations={"deny": "true"})), 100.0),
        (review("dave", "UPDATE", cm("accepted")), 101.0),
    )
    admitted = AdmittedAuthors(store)
    match = admitted.match(event("accepted"), 101.5)
    assert match is not None
    assert match.author is not None
    assert (match.author.name, match.author.source) == ("dave", "admission")


async def test_content_that_comes_back_is_not_credited_to_its_first_writer() -> None:
    store = await store_of((review("alice", "UPDATE", cm("x")), 100.0))
    admitted = AdmittedAuthors(store)
    first = admitted.match(event("x"), 100.2)
    assert first is not None
    admitted.use(first, 100.2)
    await store.add(ROUTE, admitted_facts(review("carol", "UPDATE", cm("x")), 105.0))
    again = admitted.match(event("x"), 105.3)
    assert again is not None
    assert again.author is not None
    assert again.author.name == "carol"


async def test_two_authors_of_the_same_content_name_nobody() -> None:
    store = await store_of(
        (review("alice", "UPDATE", cm("same")), 100.0),
        (review("bob", "UPDATE", cm("same")), 100.05),
    )
    match = AdmittedAuthors(store).match(event("same"), 100.2)
    assert match is not None
    assert match.author is None


async def test_deletes_join_by_uid_and_old_facts_expire() -> None:
    old = cm("v", uid="u1")
    store = await store_of((review("carol", "DELETE", None, old), 100.0))
    admitted = AdmittedAuthors(store, window=30)
    match = admitted.match(event("", "DELETE", uid="u1"), 110.0)
    assert match is not None
    assert match.author is not None
    assert match.author.name == "carol"
    assert admitted.match(event("", "DELETE", uid="u1"), 200.0) is None


@pytest.mark.parametrize(
    "req",
    [
        {**review("alice", "UPDATE", cm("v")), "dryRun": True},
        {**review("alice", "UPDATE", cm("v")), "subResource": "status"},
        review("", "UPDATE", cm("v")),
        review("a" * 600, "UPDATE", cm("v")),
        {**review("alice", "UPDATE", None)},
        {**review("alice", "DELETE", None, {"metadata": {}})},
        {**review("alice", "CONNECT", cm("v"))},
    ],
)
def test_what_cannot_be_keyed_is_not_recorded(req: Any) -> None:
    assert admitted_facts(req, 1.0) == []


async def test_audit_wins_and_admission_fills_in_after_the_grace() -> None:
    store = await store_of((review("bob", "UPDATE", cm("v2")), 1000.0))
    clock = [10.0]
    resolver = AuditAuthorResolver(
        store,
        "local",
        grace=0.0,
        clock=lambda: clock[0],
        wall=lambda: 1000.1,
        admitted=AdmittedAuthors(store),
    )
    author = await resolver.author_of(event("v2"), observed_at=10.0)
    assert author is not None
    assert (author.name, author.source) == ("bob", "admission")
    assert resolver.unresolved_streak == 0
    assert await resolver.author_of(event("never-admitted"), observed_at=10.0) is None
    assert resolver.unresolved_streak == 1


def test_a_service_url_registers_as_a_service_reference() -> None:
    from kubescribe.controller.webhooks import client_config  # noqa: PLC0415

    assert client_config("https://kubescribe-webhooks.ops.svc:9444/validate-changes") == {
        "service": {
            "name": "kubescribe-webhooks",
            "namespace": "ops",
            "port": 9444,
            "path": "/validate-changes",
        }
    }
    url = "https://127.0.0.1:9444/validate-changes"
    assert client_config(url) == {"url": url}


async def test_the_match_carries_the_username_and_two_users_behind_one_name_name_nobody() -> None:
    sa = "system:serviceaccount:flux-system:kustomize-controller"
    store = await store_of((review(sa, "UPDATE", cm("x")), 100.0))
    match = AdmittedAuthors(store).match(event("x"), 100.2)
    assert match is not None
    assert match.author is not None
    assert match.author.user == sa  # spec.ignore.changesBy matches on it

    def named(user: str) -> Any:
        req = review(user, "UPDATE", cm("y"))
        req["userInfo"]["extra"] = {"display-name": ["Ops"], "email": ["ops@example.org"]}
        return req

    store = await store_of((named("ops-1"), 100.0), (named("ops-2"), 100.1))
    both = AdmittedAuthors(store).match(event("y"), 100.2)
    assert both is not None
    assert both.author is None
