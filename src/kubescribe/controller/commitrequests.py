"""The CommitRequest controller: "save now" for a GitTarget's open commit window.

For each new request (no final `Ready`):

1. find the requester (`CommitRequestAuthors`, the admission webhook's record; unknown without);
2. wait for the GitTarget to be written (a bundle may create it with the request); a
   suspended target fails at once (`Suspended`), another problem after a grace period with
   its own reason;
3. `hold` the requester's window in the branch worker: from now on it does not close by
   silence, and changes of the requester are collected even with a `0s` commitWindow;
4. wait `collectDelay`, then until every watch stream of the target has delivered the events
   up to the request's own resourceVersion (changes applied before the request, also in the
   same `kubectl apply`, are in the window even when the request's event arrived first);
5. `fire`: the worker closes the window after everything submitted so far and reports the
   pushed SHA. A request the worker holds is never failed by a timeout here: a failing push
   is retried by the worker and shown as progress.

Conditions: `Ready` (True `Pushed` / True `NothingToCommit` / False with the failure reason),
`Pushed`, `AuthorAttributed`, and kstatus `Reconciling` / `Stalled`.

A finished request is deleted `spec.ttlAfterFinished` (24h by default) after it finished, at
`status.expiresAt`, by the replica that writes its target.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic import ValidationError

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.api.models import CommitRequestSpec
from kubescribe.attribution.decode import author_from_user
from kubescribe.controller.plan import TargetPlan
from kubescribe.controller.request_status import (
    Final,
    attribution_condition,
    expires_at,
    expiry_stamp,
    final_conditions,
    final_extra,
    is_final,
    progress_conditions,
    target_problem,
    timestamp,
)
from kubescribe.controller.status import Cond, StatusWriter, build_status
from kubescribe.git.records import RequestHandle, RequestOutcome
from kubescribe.git.worker import BranchWorker
from kubescribe.kube.client import ApiError, KubeClient
from kubescribe.kube.informer import Informer, ObjectKey, as_is, key_of
from kubescribe.mirror.authors import Author, CommitRequestAuthors
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.identity import ResourceType
from kubescribe.mirror.window import parse_duration
from kubescribe.waits import within

log = structlog.get_logger(__name__)

PLURAL = "commitrequests"
RTYPE = ResourceType("kubescribe.io", "v1alpha1", PLURAL, "CommitRequest", True)

REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
TARGET_GRACE = 10.0  # a bundle may create the target with the request: wait that long
CATCH_UP_TIMEOUT = 15.0
POLL = 0.1
LIST_EVERY = 0.5


@dataclass(frozen=True)
class TargetAccess:
    """What the controller needs of one GitTarget: its plan, its worker (when it is written)
    and the informers of its watch streams."""

    plan: TargetPlan | None
    worker: BranchWorker | None = None
    informers: Sequence[Informer[Any]] = ()
    elsewhere: bool = False  # written by another replica: that replica handles its requests


class _Elsewhere(Exception):
    """The target's writer moved to another replica, which takes the request over."""


def _target_of(key: ObjectKey, obj: Mapping[str, Any]) -> TargetKey:
    ref = (obj.get("spec") or {}).get("targetRef") or {}
    return TargetKey(key[0], str(ref.get("name") or ""))


def _version(rv: str | None) -> int | None:
    try:
        return int(rv) if rv else None
    except ValueError:
        return None


async def caught_up(
    client: KubeClient, informers: Sequence[Informer[Any]], resource_version: str, timeout: float
) -> bool:
    """Wait until every informer has delivered the events up to `resource_version`.

    A stream is past it when it saw an event or bookmark at or after it, or when a list at
    (or after) that version holds exactly the objects and versions the stream delivered.
    False after `timeout` (the caller goes on: the request closes what is there).
    """
    want = _version(resource_version)
    if want is None:
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = list(informers)
    listed_at = -LIST_EVERY
    while True:
        lagging = [i for i in pending if not i.synced.is_set() or (_version(i.rv) or 0) < want]
        if lagging and loop.time() - listed_at >= LIST_EVERY:
            listed_at = loop.time()
            lagging = [i for i in lagging if not await _matches_list(client, i, resource_version)]
        pending = lagging
        if not pending:
            return True
        if loop.time() >= deadline:
            log.warning(
                "commitrequest.catch_up_timeout",
                streams=[f"{i.rtype.gvr}|{i.namespace or '*'}" for i in pending],
            )
            return False
        await asyncio.sleep(POLL)


async def _matches_list(client: KubeClient, informer: Informer[Any], resource_version: str) -> bool:
    if not informer.synced.is_set():
        return False
    params = {"resourceVersion": resource_version, "resourceVersionMatch": "NotOlderThan"}
    if informer.label_selector:
        params["labelSelector"] = informer.label_selector
    try:
        page = await client.get(informer.path, params=params, timeout=60)
    except ApiError as exc:
        log.warning("commitrequest.list_failed", gvr=informer.rtype.gvr, error=exc.message)
        return False
    listed = {
        key_of(item): str((item.get("metadata") or {}).get("resourceVersion", ""))
        for item in page.get("items") or []
    }
    return listed == dict(informer.known)


@dataclass
class _State:
    obj: dict[str, Any]
    status: dict[str, Any] = field(default_factory=dict)
    attributed: Cond = field(
        default_factory=lambda: Cond(c.AUTHOR_ATTRIBUTED, "Unknown", c.WAITING, "Not known yet")
    )
    progress: tuple[str, str] | None = None
    progressed: asyncio.Event = field(default_factory=asyncio.Event)


class CommitRequests:
    """Watches CommitRequests and handles each new one in a task of its own."""

    def __init__(
        self,
        client: KubeClient,
        status: StatusWriter,
        authors: CommitRequestAuthors | None = None,
        *,
        target_grace: float = TARGET_GRACE,
        catch_up_timeout: float = CATCH_UP_TIMEOUT,
    ) -> None:
        self.client = client
        self.status = status
        self.lookup: Callable[[TargetKey], TargetAccess] = lambda _: TargetAccess(None)
        self.authors = authors
        self.target_grace = target_grace
        self.catch_up_timeout = catch_up_timeout
        self._objects: dict[ObjectKey, dict[str, Any]] = {}
        self._tasks: dict[ObjectKey, tuple[str, asyncio.Task[None]]] = {}
        self._expiries: dict[ObjectKey, tuple[str, asyncio.Task[None]]] = {}

    async def run(self, lookup: Callable[[TargetKey], TargetAccess]) -> None:
        """Until cancelled (then every request task is cancelled too); `lookup` tells what is
        known of a target (the manager's plan, workers and streams)."""
        self.lookup = lookup
        try:
            await Informer(self.client, RTYPE, self, prepare=as_is).run()
        finally:
            tasks = [task for _, task in [*self._tasks.values(), *self._expiries.values()]]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.clear()
            self._expiries.clear()

    # -- informer sink ---------------------------------------------------------------------
    async def on_snapshot(
        self, objects: Mapping[ObjectKey, dict[str, Any]], deleted: set[ObjectKey], rv: str
    ) -> None:
        self._objects = dict(objects)
        for key in [k for k in {*self._tasks, *self._expiries} if k not in objects]:
            self._cancel(key)
        for key in objects:
            self._consider(key)

    async def on_event(self, event_type: str, obj: dict[str, Any], rv: str) -> None:
        key = key_of(obj)
        if event_type == "DELETED":
            self._objects.pop(key, None)
            self._cancel(key)
            return
        self._objects[key] = obj
        self._consider(key)

    def _consider(self, key: ObjectKey) -> None:
        obj = self._objects[key]
        uid = str(obj["metadata"].get("uid") or "")
        running = self._tasks.get(key)
        if running is not None:
            if running[0] == uid:
                return
            self._cancel(key)  # deleted and created again under the same name
        if self.lookup(_target_of(key, obj)).elsewhere:
            return
        if is_final(obj):
            self._expire_later(key, uid, expires_at(obj))
            return
        task = asyncio.create_task(self._handle(key, obj), name=f"commitrequest {key}")
        self._tasks[key] = (uid, task)
        task.add_done_callback(functools.partial(self._done, key))

    def _expire_later(self, key: ObjectKey, uid: str, when: float | None) -> None:
        scheduled = self._expiries.get(key)
        if when is None or (scheduled is not None and scheduled[0] == uid):
            return
        if scheduled is not None:
            scheduled[1].cancel()
        task = asyncio.create_task(self._expire(key, uid, when), name=f"expire {key}")
        self._expiries[key] = (uid, task)
        task.add_done_callback(functools.partial(self._expired, key))

    async def _expire(self, key: ObjectKey, uid: str, when: float) -> None:
        """Delete the request at `when` (only the one with this uid)."""
        await asyncio.sleep(max(0.0, when - time.time()))
        # Shielded: the watch may report the deletion (which cancels this task) before the
        # answer to the DELETE arrives, and it is counted all the same.
        await asyncio.shield(self._delete(key, uid))

    async def _delete(self, key: ObjectKey, uid: str) -> None:
        path = f"/apis/kubescribe.io/v1alpha1/namespaces/{key[0]}/{PLURAL}/{key[1]}"
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            await self.client.request("DELETE", path, body=body)
        except ApiError as exc:
            if exc.status not in (404, 409):  # gone, or re-created under the same name
                log.warning("commitrequest.expire_failed", namespace=key[0], name=key[1],
                            error=str(exc))  # fmt: skip
            return
        metrics.COMMIT_REQUESTS_EXPIRED.inc()
        log.info("commitrequest.expired", namespace=key[0], name=key[1])

    def _expired(self, key: ObjectKey, task: asyncio.Task[None]) -> None:
        if self._expiries.get(key, ("", None))[1] is task:
            del self._expiries[key]

    def reconsider(self) -> None:
        """Pick up requests of targets whose writer came to this replica."""
        for key in list(self._objects):
            self._consider(key)

    def _cancel(self, key: ObjectKey) -> None:
        for tasks in (self._tasks, self._expiries):
            running = tasks.pop(key, None)
            if running is not None:
                running[1].cancel()

    def _done(self, key: ObjectKey, task: asyncio.Task[None]) -> None:
        if self._tasks.get(key, ("", None))[1] is task:
            del self._tasks[key]

    # -- one request -----------------------------------------------------------------------
    async def _handle(self, key: ObjectKey, obj: dict[str, Any]) -> None:
        state = _State(obj, dict(obj.get("status") or {}))
        try:
            final = await self._process(key, state)
        except _Elsewhere:
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never leave a request without a word
            log.exception("commitrequest.failed", name=key[1], namespace=key[0])
            final = Final(c.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        metrics.COMMIT_REQUESTS.labels(final.reason).inc()
        log.info(
            "commitrequest.done",
            namespace=key[0],
            name=key[1],
            reason=final.reason,
            sha=final.sha,
        )
        extra = {**final_extra(final), "expiresAt": expiry_stamp(state.obj, time.time())}
        await self._write(state, final_conditions(final, state.attributed), extra)
        uid = str(obj["metadata"].get("uid") or "")
        self._expire_later(key, uid, timestamp(extra["expiresAt"]))

    async def _process(self, key: ObjectKey, state: _State) -> Final:
        meta = state.obj["metadata"]
        try:
            spec = CommitRequestSpec.model_validate(state.obj.get("spec") or {})
            delay = parse_duration(spec.collect_delay) if spec.collect_delay else 0.0
        except (ValidationError, ValueError) as exc:
            return Final(c.INVALID_SPEC, str(exc).splitlines()[0])
        target = TargetKey(key[0], spec.target_ref.name)
        requester = await self._requester(key, str(meta.get("uid") or ""))
        author = None
        if spec.author is not None:
            author, refused = await self._named_author(key, str(meta.get("uid") or ""), requester,
                                                       spec.author)  # fmt: skip
            if refused is not None:
                return refused
        resource_version = str(meta.get("resourceVersion") or "")
        while True:
            access = await self._writable(target, state)
            state.attributed = attribution_condition(access.plan, requester)
            if access.worker is None:
                reason, message = target_problem(access.plan) or (
                    c.TARGET_NOT_READY,
                    f"GitTarget {target} is not written yet",
                )
                return Final(reason, message)
            final = await self._commit(
                access.worker, target, requester, (spec.message, author), delay,
                resource_version, state,
            )  # fmt: skip
            if final.reason != c.WORKER_STOPPED:
                return final
            # The target moved to another worker (e.g. its provider changed): start again.

    async def _requester(self, key: ObjectKey, uid: str) -> Author | None:
        if self.authors is None:
            return None
        try:
            return await self.authors.author_of_request(key[0], key[1], uid)
        except Exception as exc:
            log.warning("commitrequest.requester_lookup_failed", error=str(exc))
            return None

    async def _named_author(
        self, key: ObjectKey, uid: str, requester: Author | None, user: str
    ) -> tuple[Author | None, Final | None]:
        """The commit author `spec.author` names, or why the requester may not name them: an
        unknown requester, or a SubjectAccessReview that denies them `impersonate` on the user."""
        if requester is None or not requester.user or self.authors is None:
            return None, Final(
                c.AUTHOR_NOT_ALLOWED,
                "spec.author needs a known requester: the admission webhook records who created"
                " the request, and none is recorded",
            )
        groups = await self.authors.groups_of_request(key[0], key[1], uid)
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": requester.user,
                "groups": list(groups),
                "resourceAttributes": {"verb": "impersonate", "resource": "users", "name": user},
            },
        }
        try:
            answer = await self.client.request("POST", REVIEWS, body=review)
        except ApiError as exc:
            return None, Final(c.AUTHOR_NOT_ALLOWED, f"the access review failed: {exc}")
        if not (answer.get("status") or {}).get("allowed"):
            return None, Final(
                c.AUTHOR_NOT_ALLOWED,
                f"{requester.user} may not impersonate user {user!r} (spec.author)",
            )
        named = author_from_user(user)
        return Author(named.name, named.email, f"commit request by {requester.user}", user), None

    async def _writable(self, target: TargetKey, state: _State) -> TargetAccess:
        """The target's access once it is written; with no worker when it will not be."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.target_grace
        waiting_said = False
        while True:
            access = self.lookup(target)
            if access.elsewhere:
                raise _Elsewhere()
            problem = target_problem(access.plan)
            if problem is None and access.worker is not None:
                return access
            if problem is not None and problem[0] == c.SUSPENDED:
                return TargetAccess(access.plan)  # deliberate: fail at once
            if loop.time() >= deadline:
                return TargetAccess(access.plan)
            if not waiting_said:
                waiting_said = True
                message = f"Waiting for GitTarget {target}" + (f": {problem[1]}" if problem else "")
                await self._progress(state, c.WAITING, message)
            await asyncio.sleep(POLL * 2.5)

    async def _commit(
        self,
        worker: BranchWorker,
        target: TargetKey,
        requester: Author | None,
        commit: tuple[str, Author | None],
        delay: float,
        resource_version: str,
        state: _State,
    ) -> Final:
        def on_progress(reason: str, text: str) -> None:
            state.progress = (reason, text)
            state.progressed.set()

        handle = worker.hold(target, requester, on_progress)
        try:
            await self._progress(
                state,
                c.COLLECTING,
                f"Collecting changes for GitTarget {target}"
                + (f" for {delay:g}s" if delay else ""),
            )
            if delay and await self._ends_early(handle, delay):
                return self._final(target, handle.future.result())
            streams = self.lookup(target).informers
            await self._race(
                handle,
                caught_up(self.client, streams, resource_version, self.catch_up_timeout),
            )
            future = worker.fire(handle, *commit)
            await self._progress(
                state, c.COMMITTING, f"Committing the window of GitTarget {target}"
            )
            while not future.done():
                state.progressed.clear()
                waiter: asyncio.Future[Any] = asyncio.ensure_future(state.progressed.wait())
                try:
                    await asyncio.wait({future, waiter}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                if state.progress is not None and not future.done():
                    await self._progress(state, *state.progress)
            return self._final(target, future.result())
        finally:
            worker.release(handle)

    async def _ends_early(self, handle: RequestHandle, delay: float) -> bool:
        """Wait `delay`; True when the worker ended the request meanwhile."""
        await within(asyncio.shield(handle.future), delay)
        return handle.future.done()

    async def _race(self, handle: RequestHandle, work: Any) -> None:
        """Run `work` unless the worker ends the request first."""
        task = asyncio.ensure_future(work)
        try:
            await asyncio.wait({task, handle.future}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            task.cancel()
            await asyncio.wait({task})  # its outcome is the request's; ours stays ours

    def _final(self, target: TargetKey, outcome: RequestOutcome) -> Final:
        reason, message = outcome.reason, outcome.message
        if reason == c.TARGET_NOT_WRITABLE:
            # Say why the target is not written (Suspended, PathOverlap, ...), when known.
            problem = target_problem(self.lookup(target).plan)
            if problem is not None:
                reason, message = problem
        return Final(
            reason,
            message,
            outcome.branch,
            outcome.sha,
            outcome.changes,
            outcome.author,
        )

    async def _progress(self, state: _State, reason: str, message: str) -> None:
        await self._write(state, progress_conditions(reason, message, state.attributed), {})

    async def _write(self, state: _State, conds: list[Cond], extra: Mapping[str, Any]) -> None:
        obj = {**state.obj, "status": state.status}
        await self.status.write(obj, PLURAL, conds, extra)
        generation = int(state.obj["metadata"].get("generation") or 0)
        state.status = build_status(state.status, conds, generation, extra)
