"""A resumed watch's backlog reads each object's current state once, with the stream's label
selector, and a backlog of many objects reads them all with one paginated list."""

from __future__ import annotations

from typing import Any, cast

from kubescribe.kube import backlog as backlog_module
from kubescribe.kube.backlog import Backlog
from kubescribe.kube.client import ApiError, KubeClient

PATH = "/api/v1/namespaces/ns/configmaps"


class FakeApi:
    """The collection's current objects; records every LIST it answers."""

    def __init__(self, objects: dict[str, str], collection: str = "100") -> None:
        self.objects = objects  # name -> resourceVersion
        self.collection = collection
        self.requests: list[dict[str, str]] = []

    async def get(self, path: str, **kwargs: Any) -> Any:
        assert path == PATH
        params = dict(kwargs.get("params") or {})
        self.requests.append(params)
        names = sorted(self.objects)
        fields = params.get("fieldSelector", "")
        if fields:
            wanted = dict(f.split("=", 1) for f in fields.split(","))
            names = [n for n in names if n == wanted["metadata.name"]]
        start = int(params.get("continue") or 0)
        limit = int(params.get("limit") or len(names) or 1)
        page = names[start : start + limit]
        meta: dict[str, str] = {"resourceVersion": self.collection}
        if start + limit < len(names):
            meta["continue"] = str(start + limit)
        items = [
            {"metadata": {"namespace": "ns", "name": n, "resourceVersion": self.objects[n]}}
            for n in page
        ]
        return {"metadata": meta, "items": items}


async def opened(api: FakeApi, cursor: str = "10", **kwargs: Any) -> Backlog | None:
    return await Backlog.open(cast(KubeClient, api), PATH, cursor, **kwargs)


async def test_the_horizon_is_the_collection_version_read_before_the_watch() -> None:
    api = FakeApi({"a": "50"}, collection="120")
    backlog = await opened(api)
    assert backlog is not None
    assert backlog.horizon == "120"
    assert api.requests == [{"limit": "1"}]
    assert backlog.covers("120")
    assert not backlog.covers("121")


async def test_no_backlog_when_nothing_changed_since_the_cursor() -> None:
    assert await opened(FakeApi({}, collection="10")) is None


async def test_each_object_is_looked_up_once_with_the_stream_selector() -> None:
    api = FakeApi({"kept": "15"})
    backlog = await opened(api, label_selector="shard=a")
    assert backlog is not None
    assert not await backlog.applies("MODIFIED", ("ns", "doomed"), "12")  # deleted since
    assert await backlog.applies("DELETED", ("ns", "doomed"), "13")
    assert not await backlog.applies("MODIFIED", ("ns", "kept"), "14")  # superseded
    assert await backlog.applies("MODIFIED", ("ns", "kept"), "15")
    since = {"resourceVersion": "100", "resourceVersionMatch": "NotOlderThan"}  # the horizon
    assert api.requests[1:] == [
        {"fieldSelector": f"metadata.name={name},metadata.namespace=ns", "labelSelector": "shard=a"}
        | since
        for name in ("doomed", "kept")
    ]
    assert (backlog.applied, backlog.stale, backlog.lookups, backlog.listed) == (2, 2, 2, False)


async def test_a_backlog_of_many_objects_is_checked_against_one_list(monkeypatch: Any) -> None:
    monkeypatch.setattr(backlog_module, "LOOKUPS", 3)
    objects = {f"cm-{i}": str(20 + i) for i in range(10)}
    api = FakeApi(objects)
    backlog = await opened(api, page_size=4)
    assert backlog is not None
    for i in range(10):
        assert await backlog.applies("MODIFIED", ("ns", f"cm-{i}"), str(20 + i))
    assert not await backlog.applies("ADDED", ("ns", "gone"), "11")
    listed = [r for r in api.requests if "fieldSelector" not in r and r != {"limit": "1"}]
    assert len(api.requests) == 1 + 3 + len(listed)
    assert [r.get("continue") for r in listed] == [None, "4", "8"]
    # The first page as of the horizon or later; the next ones follow its continue token.
    assert [r.get("resourceVersionMatch") for r in listed] == ["NotOlderThan", None, None]
    assert backlog.listed


async def test_an_api_without_field_selectors_is_checked_against_a_list() -> None:
    class NoFieldSelectors(FakeApi):
        async def get(self, path: str, **kwargs: Any) -> Any:
            if "fieldSelector" in (kwargs.get("params") or {}):
                self.requests.append(dict(kwargs["params"]))
                raise ApiError(400, "BadRequest", "field label not supported: metadata.name")
            return await super().get(path, **kwargs)

    api = NoFieldSelectors({"a": "12"})
    backlog = await opened(api)
    assert backlog is not None
    assert await backlog.applies("MODIFIED", ("ns", "a"), "12")
    assert not await backlog.applies("MODIFIED", ("ns", "b"), "11")
    assert backlog.listed
    assert len(api.requests) == 3  # the horizon, the refused lookup, one list
