"""A validating admission webhook that always allows, and records who created each
CommitRequest (AdmissionReview v1 `request.userInfo`) for the CommitRequest controller.

`POST /validate-commitrequests` with an AdmissionReview; the answer allows every request (also
when recording fails: the webhook must never block the API). Register it for `CREATE` of
`commitrequests.kubescribe.io` with `failurePolicy: Ignore`.

Only kube-apiserver may call it: a verified client certificate is required (401 without one)
whose CN or DNS/URI SAN is allowed (`clients`, 403 otherwise; by default
`kubescribe-admission`). Bounds: `MAX_BODY` (413), the decoded-memory budget (413), a read
timeout (408); a review whose username, name, namespace or uid is over its cap is answered
but not recorded. Bad input gets 400/415. Refusals are counted in
`kubescribe_webhook_refusals_total{server="admission",reason}`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from aiohttp import web

from kubescribe import metrics
from kubescribe.attribution.admitted import ROUTE as ADMISSION_ROUTE
from kubescribe.attribution.admitted import admitted_facts
from kubescribe.attribution.decode import FIELD_CAPS, author_from_user, json_memory_bound
from kubescribe.attribution.facts import FactIndex
from kubescribe.attribution.requests import RecordedRequestAuthors
from kubescribe.server.audit import DECODED_BUDGET, READ_TIMEOUT, Refused, read_body
from kubescribe.server.tls import ClientPolicy, peer_identities

log = structlog.get_logger(__name__)

PATH = "/validate-commitrequests"
CHANGES_PATH = "/validate-changes"
MAX_BODY = 2 * 1024 * 1024  # a review of one object (etcd caps objects at 1.5 MiB)


def admission_app(
    authors: RecordedRequestAuthors,
    clients: ClientPolicy,
    *,
    changes: FactIndex | None = None,
    read_timeout: float = READ_TIMEOUT,
) -> web.Application:
    """`PATH` records CommitRequest creators; with `changes`, `CHANGES_PATH` records who wrote
    each object of the watched types (attribution without audit, see `attribution.admitted`)."""

    def refuse(
        status: int, reason: str, message: str, peer: frozenset[str] = frozenset()
    ) -> web.Response:
        metrics.ADMISSION_REVIEWS.labels("invalid").inc()
        metrics.REFUSED_REQUESTS.labels("admission", reason).inc()
        log.warning("admission.refused", status=status, reason=reason, client=sorted(peer)[:4])
        return web.json_response({"message": message}, status=status)

    async def validate_requests(request: web.Request) -> web.Response:
        return await validate(request, lambda req: _record(authors, req))

    async def validate_changes(request: web.Request) -> web.Response:
        assert changes is not None
        return await validate(request, lambda req: _record_change(changes, req))

    async def validate(
        request: web.Request, record: Callable[[Mapping[str, Any]], Awaitable[str]]
    ) -> web.Response:
        peer = peer_identities(request.transport)
        if peer is None and not clients.anonymous:
            return refuse(401, "no_client_certificate", "a client certificate is required")
        peer = peer or frozenset()
        try:
            if not clients.allows(peer):
                raise Refused(403, "client_not_allowed", "this client may not call here")
            req, uid = _review(await _body(request, read_timeout))
        except Refused as no:
            return refuse(no.status, no.reason, no.message, peer)
        try:
            result = await record(req)
        except Exception as exc:  # never block the API because of bookkeeping
            log.error("admission.record_failed", error=str(exc))
            result = "failed"
        metrics.ADMISSION_REVIEWS.labels(result).inc()
        return web.json_response(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": True},
            }
        )

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post(PATH, validate_requests)
    if changes is not None:
        app.router.add_post(CHANGES_PATH, validate_changes)
    return app


async def _body(request: web.Request, read_timeout: float) -> bytes:
    """The body of a JSON request, bounded in size, decoded size and time to arrive."""
    body = await read_body(request, MAX_BODY, read_timeout)
    if json_memory_bound(body) > DECODED_BUDGET:
        raise Refused(413, "decoded_too_large", "body too large once decoded")
    return body


def _review(body: bytes) -> tuple[Mapping[str, Any], str]:
    """The request of an AdmissionReview and its uid."""
    try:
        review = json.loads(body)
    except (ValueError, RecursionError):
        review = None
    req = review.get("request") if isinstance(review, Mapping) else None
    uid = req.get("uid") if isinstance(req, Mapping) else None
    if not isinstance(review, Mapping) or review.get("kind") != "AdmissionReview":
        uid = None
    if not isinstance(req, Mapping) or not isinstance(uid, str) or not 0 < len(uid) <= 128:
        raise Refused(400, "not_an_admission_review", "want an AdmissionReview v1")
    return req, uid


async def _record_change(facts: FactIndex, req: Mapping[str, Any]) -> str:
    """Record who wrote the object; the result label (recorded, ignored)."""
    found = admitted_facts(req, time.time())
    if not found:
        return "ignored"
    await facts.add(ADMISSION_ROUTE, [(keys, record) for keys, record in found])
    return "recorded"


async def _record(authors: RecordedRequestAuthors, req: Mapping[str, Any]) -> str:
    """Record the requester; the result label (recorded, ignored, oversized)."""
    kind = req.get("kind")
    if not isinstance(kind, Mapping) or kind.get("kind") != "CommitRequest":
        return "ignored"
    if req.get("operation") != "CREATE" or req.get("dryRun") is True:
        return "ignored"
    obj = req.get("object")
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    user = req.get("userInfo")
    username = user.get("username") if isinstance(user, Mapping) else None
    if not isinstance(username, str) or not username:
        return "ignored"
    extra = user.get("extra") if isinstance(user, Mapping) else None
    name = meta.get("name") or req.get("name")
    namespace = meta.get("namespace") or req.get("namespace") or ""
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        return "ignored"
    uid = meta.get("uid")
    uid = uid if isinstance(uid, str) else ""
    fields = {"username": username, "name": name, "namespace": namespace, "uid": uid}
    if any(len(value) > FIELD_CAPS[field] for field, value in fields.items()):
        log.warning("admission.oversized", sizes={f: len(v) for f, v in fields.items()})
        return "oversized"
    author = author_from_user(username, extra if isinstance(extra, Mapping) else None)
    await authors.record(namespace, name, uid, author, _groups(user))
    log.info("admission.recorded", namespace=namespace, name=name, user=username)
    return "recorded"


MAX_GROUPS = 256


def _groups(user: Any) -> tuple[str, ...]:
    """The requester's groups (for the access review of `spec.author`), bounded."""
    groups = user.get("groups") if isinstance(user, Mapping) else None
    if not isinstance(groups, list):
        return ()
    return tuple(g for g in groups[:MAX_GROUPS] if isinstance(g, str) and len(g) <= 1024)
