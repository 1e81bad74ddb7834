"""A real extension API server for tests, served through kube-apiserver's aggregator.

One namespaced resource, `widgets.demo.kubescribe.test/v1` (kind Widget), kept in memory:
discovery (`/apis`, `/apis/<group>`, `/apis/<group>/v1`), list, get, watch (from a
resourceVersion or with `sendInitialEvents`, bookmarks), create, update, merge patch (a
strategic merge patch is taken as a merge patch: widgets have no lists to merge), delete.
It listens with HTTPS (its own CA) in a thread of its own, and `register` makes kube-apiserver
route the group to it: an APIService with the CA as `caBundle`, a selector-less Service, and
Endpoints plus an EndpointSlice naming this host.

kube-apiserver needs `--enable-aggregator-routing=true` (`AGGREGATOR_ARGS`): the test control
plane has no kube-proxy, so the aggregator must dial an endpoint address, not the Service's
cluster IP. Endpoint addresses may not be loopback (validation refuses 127.0.0.0/8), so the
server listens on all addresses and the endpoints name the host's own non-loopback address
(`host_address`). A host with none can get one, as root: `ip addr add 10.250.0.1/32 dev lo`.

The proxied requests carry the user in `X-Remote-User`; this test server trusts every caller
(kube-apiserver presents no proxy client certificate here), which a real one must not.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
import socket
import ssl
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from kubescribe_devenv.controlplane import ControlPlane, ControlPlaneError
from kubescribe_devenv.pki import CertificateAuthority

GROUP = "demo.kubescribe.test"
VERSION = "v1"
KIND = "Widget"
RESOURCE = "widgets"
API_VERSION = f"{GROUP}/{VERSION}"
AGGREGATOR_ARGS = ("--enable-aggregator-routing=true",)
BOOKMARK_EVERY = 5.0
_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
_MERGE_PATCHES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


def host_address() -> str:
    """This host's own non-loopback IPv4 address (the one its default route leaves by)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock, contextlib.suppress(OSError):
        sock.connect(("10.255.255.255", 9))  # UDP: nothing is sent
        address: str = sock.getsockname()[0]
        if not address.startswith("127.") and address != "0.0.0.0":
            return address
    with contextlib.suppress(OSError):
        for address in socket.gethostbyname_ex(socket.gethostname())[2]:
            if not address.startswith("127."):
                return address
    raise ControlPlaneError(
        "no non-loopback IPv4 address for the aggregated API's endpoints "
        "(as root: ip addr add 10.250.0.1/32 dev lo)"
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


@dataclass
class _Change:
    rv: int
    type: str
    obj: dict[str, Any]


class WidgetStore:
    """Widgets by (namespace, name), every change kept (tests are short), and the watchers."""

    def __init__(self) -> None:
        self.rv = 1
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.changes: list[_Change] = []
        self.watchers: set[asyncio.Queue[_Change]] = set()

    def _commit(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        change = _Change(self.rv, kind, json.loads(json.dumps(obj)))
        self.changes.append(change)
        for queue in self.watchers:
            queue.put_nowait(change)
        return obj

    def create(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            generation=1,
            creationTimestamp=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        obj.update(apiVersion=API_VERSION, kind=KIND)
        self.objects[(namespace, meta["name"])] = obj
        return self._commit("ADDED", obj)

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
        for key in ("name", "namespace", "uid", "creationTimestamp", "generation"):
            meta[key] = old_meta[key]
        new.update(apiVersion=API_VERSION, kind=KIND)
        if new.get("spec") != old.get("spec"):
            meta["generation"] = old_meta["generation"] + 1
        self.objects[(meta["namespace"], meta["name"])] = new
        return self._commit("MODIFIED", new)

    def delete(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        del self.objects[(meta["namespace"], meta["name"])]
        return self._commit("DELETED", obj)


class AggregatedServer:
    """The widgets API server (`with AggregatedServer() as api: api.register(cp)`)."""

    def __init__(self, service: str = "widgets-api", namespace: str = "default") -> None:
        self.service = service
        self.namespace = namespace
        self.address = host_address()
        self.ca = CertificateAuthority("kubescribe-aggregated-ca")
        self.store = WidgetStore()
        self.port = 0
        self.requests: list[tuple[str, str, str]] = []  # (method, path, X-Remote-User)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> AggregatedServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)

    def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _start(self) -> None:
        hosts = (
            self.address,
            f"{self.service}.{self.namespace}.svc",
            f"{self.service}.{self.namespace}.svc.cluster.local",
        )
        pair = self.ca.issue(f"{self.service}.{self.namespace}.svc", hosts=hosts)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with _pem_files(pair.cert_pem, pair.key_pem) as (cert, key):
            ctx.load_cert_chain(cert, key)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, "0.0.0.0", 0, ssl_context=ctx).start()
        self.port = int(self._runner.addresses[0][1])

    # -- registration ----------------------------------------------------------------------
    def manifests(self) -> list[dict[str, Any]]:
        """The Service, Endpoints, EndpointSlice and APIService that route the group here."""
        ref = {"name": self.service, "namespace": self.namespace}
        port = {"name": "https", "port": self.port, "protocol": "TCP"}
        return [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": ref,
                "spec": {
                    "ports": [
                        {"name": "https", "port": 443, "targetPort": self.port, "protocol": "TCP"}
                    ]
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": ref,
                "subsets": [{"addresses": [{"ip": self.address}], "ports": [port]}],
            },
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{self.service}-1",
                    "namespace": self.namespace,
                    "labels": {"kubernetes.io/service-name": self.service},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [self.address], "conditions": {"ready": True}}],
                "ports": [port],
            },
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{VERSION}.{GROUP}"},
                "spec": {
                    "group": GROUP,
                    "version": VERSION,
                    "groupPriorityMinimum": 1000,
                    "versionPriority": 15,
                    "service": {"name": self.service, "namespace": self.namespace, "port": 443},
                    "caBundle": base64.b64encode(self.ca.cert_pem).decode(),
                },
            },
        ]

    def register(self, cp: ControlPlane, timeout: float = 60) -> None:
        """Route the group to this server and wait until the aggregator finds it Available
        and discovery lists the resource."""
        cp.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": self.manifests()}))
        deadline = time.monotonic() + timeout
        while True:
            found = cp.get_json("apiservice", f"{VERSION}.{GROUP}")
            conditions = (found.get("status") or {}).get("conditions") or []
            available = [c for c in conditions if c.get("type") == "Available"]
            if available and available[0].get("status") == "True":
                listed = cp.kubectl("api-resources", f"--api-group={GROUP}", check=False)
                if RESOURCE in listed.stdout:
                    return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"APIService not available in {timeout:.0f} s: {found}")
            time.sleep(0.2)

    # -- HTTP ------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            (request.method, request.path, request.headers.get("X-Remote-User", ""))
        )
        parts = [p for p in request.path.split("/") if p]
        if parts in (["apis"], ["apis", GROUP]):
            return web.json_response(_group_list() if len(parts) == 1 else _group())
        if parts[:3] != ["apis", GROUP, VERSION]:
            return _status(404, "NotFound", f"{request.path} not found")
        rest = parts[3:]
        if not rest:
            return web.json_response(_resource_list())
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if rest[0] != RESOURCE or len(rest) > 2:
            return _status(404, "NotFound", f"{request.path} not found")
        if len(rest) == 1:
            return await self._collection(request, namespace)
        if not namespace:
            return _status(404, "NotFound", "widgets are namespaced")
        return await self._item(request, namespace, rest[1])

    async def _collection(self, request: web.Request, namespace: str) -> web.StreamResponse:
        if request.method == "GET":
            if request.query.get("watch") in ("1", "true"):
                return await self._watch(request, namespace)
            objects = sorted(self.store.objects.items())
            chosen = _selector(request, namespace)
            items = [o for _, o in objects if chosen(o)]
            return web.json_response(
                {
                    "apiVersion": API_VERSION,
                    "kind": f"{KIND}List",
                    "metadata": {"resourceVersion": str(self.store.rv)},
                    "items": items,
                }
            )
        if request.method == "POST" and namespace:
            body = await _body(request)
            if isinstance(body, web.Response):
                return body
            name = (body.get("metadata") or {}).get("name")
            if not isinstance(name, str) or not name:
                return _status(422, "Invalid", "metadata.name is required")
            if (namespace, name) in self.store.objects:
                return _status(409, "AlreadyExists", f"widgets {name!r} already exists")
            return web.json_response(self.store.create(namespace, body), status=201)
        return _status(405, "MethodNotAllowed", f"{request.method} on the collection")

    async def _item(self, request: web.Request, namespace: str, name: str) -> web.Response:
        current = self.store.objects.get((namespace, name))
        if current is None:
            return _status(404, "NotFound", f'widgets.{GROUP} "{name}" not found')
        if request.method == "GET":
            return web.json_response(current)
        if request.method == "DELETE":
            return web.json_response(self.store.delete(current))
        body = await _body(request)
        if isinstance(body, web.Response):
            return body
        if request.method == "PATCH":
            if request.content_type not in _MERGE_PATCHES:
                return _status(415, "UnsupportedMediaType", f"{request.content_type}")
            body = merge_patch(json.loads(json.dumps(current)), body)
        elif request.method != "PUT":
            return _status(405, "MethodNotAllowed", request.method)
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if request.method == "PUT" and wanted and wanted != current["metadata"]["resourceVersion"]:
            return _status(409, "Conflict", "the object has been modified")
        return web.json_response(self.store.update(current, body))

    async def _watch(self, request: web.Request, namespace: str) -> web.StreamResponse:
        query = request.query
        timeout = float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") == "true"
        chosen = _selector(request, namespace)
        queue: asyncio.Queue[_Change] = asyncio.Queue()
        self.store.watchers.add(queue)  # before the snapshot: no change falls between
        initial: list[dict[str, Any]] = []
        if query.get("sendInitialEvents") == "true":
            initial = [o for _, o in sorted(self.store.objects.items()) if chosen(o)]
            last = self.store.rv
        else:
            last = int(query.get("resourceVersion") or self.store.rv)
            for change in [c for c in self.store.changes if c.rv > last]:
                queue.put_nowait(change)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await response.prepare(request)

            async def send(kind: str, obj: Mapping[str, Any]) -> None:
                line = json.dumps({"type": kind, "object": obj}) + "\n"
                await response.write(line.encode())

            if query.get("sendInitialEvents") == "true":
                for obj in initial:
                    await send("ADDED", obj)
                end = {"k8s.io/initial-events-end": "true"}
                await send("BOOKMARK", _bookmark(last, end))
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                try:
                    async with asyncio.timeout(min(left, BOOKMARK_EVERY)):
                        change = await queue.get()
                except TimeoutError:
                    if bookmarks:
                        await send("BOOKMARK", _bookmark(last))
                    continue
                if change.rv > last:
                    last = change.rv
                    if chosen(change.obj):
                        await send(change.type, change.obj)
        except ConnectionError:
            pass  # the client went away
        finally:
            self.store.watchers.discard(queue)
        return response


def _selector(request: web.Request, namespace: str) -> Callable[[Mapping[str, Any]], bool]:
    """Which objects a list or watch is about: the namespace of its path, and the
    `metadata.name`/`metadata.namespace` terms of its `fieldSelector` (kubectl delete waits
    with one)."""
    wanted = {"metadata.namespace": namespace} if namespace else {}
    for term in filter(None, request.query.get("fieldSelector", "").split(",")):
        field, _, value = term.partition("=")
        wanted[field.rstrip("=")] = value.lstrip("=")

    def chosen(obj: Mapping[str, Any]) -> bool:
        meta = obj["metadata"]
        return all(meta.get(f.removeprefix("metadata.")) == v for f, v in wanted.items())

    return chosen


async def _body(request: web.Request) -> dict[str, Any] | web.Response:
    try:
        body = json.loads(await request.read())
    except ValueError:
        return _status(400, "BadRequest", "the body is not JSON")
    if not isinstance(body, dict):
        return _status(400, "BadRequest", "the body is not an object")
    return body


def _bookmark(rv: int, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}


def _group() -> dict[str, Any]:
    version = {"groupVersion": API_VERSION, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    }


def _group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group()]}


def _resource_list() -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": [
            {
                "name": RESOURCE,
                "singularName": "widget",
                "namespaced": True,
                "kind": KIND,
                "verbs": _VERBS,
            }
        ],
    }


@contextlib.contextmanager
def _pem_files(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="kubescribe-aggregated-") as folder:
        cert_path, key_path = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        cert_path.write_bytes(cert)
        key_path.write_bytes(key)
        yield str(cert_path), str(key_path)
