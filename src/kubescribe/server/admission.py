"""A validating admission webhook that always allows, and records who created each
CommitRequest (AdmissionReview v1 `request.userInfo`) for the CommitRequest controller.

`POST /validate-commitrequests` with an AdmissionReview; the answer allows every request (also
when recording fails: the webhook must never block the API). Bad input gets 400/415.
Register it for `CREATE` of `commitrequests.kubescribe.io` with `failurePolicy: Ignore`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import structlog
from aiohttp import web

from kubescribe import metrics
from kubescribe.attribution.decode import author_from_user
from kubescribe.attribution.requests import RecordedRequestAuthors
from kubescribe.server.tls import peer_common_name

log = structlog.get_logger(__name__)

PATH = "/validate-commitrequests"
MAX_BODY = 4 * 1024 * 1024


def admission_app(
    authors: RecordedRequestAuthors, *, require_client_cert: bool = False
) -> web.Application:
    async def validate(request: web.Request) -> web.Response:
        if require_client_cert and peer_common_name(request.transport) is None:
            metrics.ADMISSION_REVIEWS.labels("invalid").inc()
            return web.json_response({"message": "a client certificate is required"}, status=401)
        if request.content_type != "application/json":
            metrics.ADMISSION_REVIEWS.labels("invalid").inc()
            return web.json_response({"message": "want application/json"}, status=415)
        try:
            review = json.loads(await request.read())
        except (ValueError, RecursionError):
            review = None
        req = review.get("request") if isinstance(review, Mapping) else None
        uid = req.get("uid") if isinstance(req, Mapping) else None
        if not isinstance(review, Mapping) or review.get("kind") != "AdmissionReview":
            uid = None
        if not isinstance(req, Mapping) or not isinstance(uid, str) or not uid:
            metrics.ADMISSION_REVIEWS.labels("invalid").inc()
            return web.json_response({"message": "want an AdmissionReview v1"}, status=400)
        result = "ignored"
        try:
            if await _record(authors, req):
                result = "recorded"
        except Exception as exc:  # never block the API because of bookkeeping
            log.error("admission.record_failed", error=str(exc))
            result = "failed"
        metrics.ADMISSION_REVIEWS.labels(result).inc()
        return web.json_response(
            {
                "apiVersion": review.get("apiVersion") or "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": True},
            }
        )

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post(PATH, validate)
    return app


async def _record(authors: RecordedRequestAuthors, req: Mapping[str, Any]) -> bool:
    kind = req.get("kind")
    if not isinstance(kind, Mapping) or kind.get("kind") != "CommitRequest":
        return False
    if req.get("operation") != "CREATE" or req.get("dryRun") is True:
        return False
    obj = req.get("object")
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    user = req.get("userInfo")
    username = user.get("username") if isinstance(user, Mapping) else None
    if not isinstance(username, str) or not username:
        return False
    extra = user.get("extra") if isinstance(user, Mapping) else None
    name = meta.get("name") or req.get("name")
    namespace = meta.get("namespace") or req.get("namespace") or ""
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        return False
    uid = meta.get("uid")
    author = author_from_user(username, extra if isinstance(extra, Mapping) else None)
    await authors.record(namespace, name, uid if isinstance(uid, str) else "", author)
    log.info("admission.recorded", namespace=namespace, name=name, user=username)
    return True
