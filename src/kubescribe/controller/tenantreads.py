"""What each WatchRule's namespace may read, asked of the API server (`--tenant-service-account`).

The model: the operator reads with a wide ClusterRole, so a WatchRule is a request to lend that
access. With the flag, it lends only what the tenant could read itself: a ServiceAccount of the
given name in the WatchRule's namespace must be allowed to `list` and `watch` each type in each
namespace the rule reads. The operator asks with a SubjectAccessReview (as Flux checks a
Kustomization's `serviceAccountName`, but without impersonating it: the operator keeps one
client and needs only `create` on subjectaccessreviews). RBAC's escalation check bounds what a
tenant can bind to its ServiceAccount by what it holds itself.

Answers are kept `ttl` seconds, so a revoked Role stops the mirror at the next reconcile after
that; an answer that cannot be refreshed (API server errors) is kept as it was, and a question
never answered is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Set
from typing import Any

import aiohttp
import structlog

from kubescribe import metrics
from kubescribe.controller.plan import ReadQuestion, TenantReads
from kubescribe.kube.client import ApiError, KubeClient

log = structlog.get_logger(__name__)

PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
VERBS = ("list", "watch")


def review(service_account: str, question: ReadQuestion, verb: str) -> dict[str, Any]:
    """The SubjectAccessReview of `verb` for the ServiceAccount, as it would authenticate."""
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{question.reader}:{service_account}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{question.reader}",
                "system:authenticated",
            ],
            "resourceAttributes": {
                "namespace": question.source,
                "verb": verb,
                "group": question.group,
                "resource": question.resource,
            },
        },
    }


class TenantReadReviews:
    def __init__(
        self,
        client: KubeClient,
        service_account: str,
        *,
        ttl: float = 30.0,
        concurrency: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.service_account = service_account
        self.ttl = ttl
        self.clock = clock
        self._limit = asyncio.Semaphore(concurrency)
        self._answers: dict[ReadQuestion, tuple[bool, float]] = {}  # answer, when asked

    def known(self) -> TenantReads:
        return TenantReads(self.service_account, {q: a for q, (a, _) in self._answers.items()})

    async def refresh(self, questions: Set[ReadQuestion]) -> bool:
        """Ask the questions not answered in the last `ttl` seconds and forget those no longer
        asked; True when an answer is new or changed."""
        for gone in self._answers.keys() - questions:
            del self._answers[gone]
        now = self.clock()
        stale = [
            q for q in questions if q not in self._answers or now - self._answers[q][1] > self.ttl
        ]
        if not stale:
            return False
        answers = await asyncio.gather(*(self._ask(q) for q in stale))
        changed = False
        for question, answer in zip(stale, answers, strict=True):
            if answer is None:
                continue  # kept as it was (or still unanswered: refused)
            changed |= self._answers.get(question, (None, 0.0))[0] != answer
            self._answers[question] = (answer, now)
        return changed

    async def _ask(self, question: ReadQuestion) -> bool | None:
        """Whether both verbs are allowed; None when the API server could not answer."""
        async with self._limit:
            try:
                for verb in VERBS:
                    body = review(self.service_account, question, verb)
                    found = await self.client.request("POST", PATH, body=body)
                    if not (found.get("status") or {}).get("allowed", False):
                        metrics.TENANT_READ_REVIEWS.labels("denied").inc()
                        return False
            except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                metrics.TENANT_READ_REVIEWS.labels("failed").inc()
                log.warning("tenant_reads.review_failed", error=str(exc) or type(exc).__name__)
                return None
        metrics.TENANT_READ_REVIEWS.labels("allowed").inc()
        return True
