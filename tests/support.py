"""Test harnesses and waiters: wait on conditions (no blind sleeps), run the operator as a real
process, drive one branch worker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from kubescribe.git.records import WriteReport
from kubescribe.git.targets import TargetConfig
from kubescribe.git.worker import BranchWorker
from kubescribe.mirror.changes import Change, Cursor, Snapshot, TargetKey
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.operator import OperatorProcess
from tests.builders import COMMITTER, TARGET
from tests.manifests import CM_RULE, provider, target, watch_rule

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | Literal[False] | None],
    timeout: float = 30,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll `check` until it returns a truthy value; fail with the last value after `timeout`."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def stays(check: Callable[[], bool], seconds: float = 1.0, what: str = "condition") -> None:
    """A negative check: `check` must hold on every poll for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), f"{what} stopped holding"
        time.sleep(0.05)


class Operator(OperatorProcess):
    """The operator process against a test control plane."""

    def __init__(
        self, cp: ControlPlane, workdir: Path, *extra: str, allow_file_urls: bool = True
    ) -> None:
        super().__init__(cp.kubeconfig, workdir, *extra, allow_file_urls=allow_file_urls)
        self.cp = cp

    def start(self) -> Operator:
        super().start()
        return self


def record_figure(name: str, value: float, group: str) -> None:
    """Keep a measured figure in .devenv/<group>-figures-<worker>.json, for the closing notes
    and bench comparisons (tests assert outcomes; durations are only recorded)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    path = Path(__file__).resolve().parent.parent / ".devenv" / f"{group}-figures-{worker}.json"
    path.parent.mkdir(exist_ok=True)
    figures = json.loads(path.read_text()) if path.exists() else {}
    figures[name] = round(value, 2)
    path.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")


@contextlib.contextmanager
def operators(
    cp: ControlPlane, workdir: Path, *flags: str, serving: bool = False
) -> Iterator[Callable[..., Operator]]:
    """Start `kubescribe run` against `cp` by calling the yielded function (with `flags` and
    its own; file:// remotes allowed unless `allow_file_urls=False`); with `serving`, each
    start returns once the metrics endpoint answers. Every process is stopped on exit."""
    started: list[Operator] = []

    def start(*extra: str, allow_file_urls: bool = True) -> Operator:
        op = Operator(cp, workdir, *flags, *extra, allow_file_urls=allow_file_urls).start()
        started.append(op)
        if serving:
            wait_for(op.metrics, timeout=30, what="the operator's metrics endpoint")
        return op

    try:
        yield start
    finally:
        for op in started:
            op.stop()


def condition(
    cp: ControlPlane, kind: str, name: str, namespace: str | None, ctype: str
) -> dict[str, Any] | None:
    args = [kind, name] + (["-n", namespace] if namespace else [])
    obj = cp.get_json(*args)
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return dict(cond)
    return None


def condition_state(
    cp: ControlPlane, kind: str, name: str, namespace: str | None, ctype: str
) -> tuple[str | None, str | None]:
    """(status, reason) of condition `ctype`, (None, None) while it is not set."""
    found = condition(cp, kind, name, namespace, ctype) or {}
    return found.get("status"), found.get("reason")


def manifest(*docs: dict[str, Any]) -> str:
    return "\n---\n".join(json.dumps(d) for d in docs)


def wait_condition(
    cp: ControlPlane,
    kind: str,
    name: str,
    ns: str,
    ctype: str,
    status: str,
    reason: str | None = None,
    timeout: float = 60,
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        cond = condition(cp, kind, name, ns, ctype)
        if cond and cond["status"] == status and reason in (None, cond["reason"]):
            return cond
        return None

    return wait_for(check, timeout=timeout, what=f"{kind} {name} {ctype}={status} {reason or ''}")


def wait_ready(cp: ControlPlane, ns: str, name: str = "mirror", timeout: float = 90) -> None:
    """GitTarget `ns/name` is Ready."""
    wait_for(
        lambda: (condition(cp, "gittarget", name, ns, "Ready") or {}).get("status") == "True",
        timeout=timeout,
        what=f"GitTarget {name} Ready",
    )


def commit_noise(remote: BareRemote, size: int, name: str = "noise.bin") -> None:
    """Commit a file of `size` incompressible bytes to the remote's branch."""
    path = remote.path / name
    path.write_bytes(os.urandom(size))
    blob = git("hash-object", "-w", str(path), cwd=remote.path).strip()
    path.unlink()
    tree = git("mktree", cwd=remote.path, input=f"100644 blob {blob}\t{name}\n").strip()
    parent = remote.tip()
    assert parent is not None
    commit = git("commit-tree", tree, "-p", parent, "-m", "Add noise", cwd=remote.path).strip()
    git("update-ref", f"refs/heads/{remote.branch}", commit, cwd=remote.path)


def metric(op: Operator, name: str, labels: str = "") -> float:
    """A counter's value from the operator's /metrics, for exactly `labels` (`a="x",b="y"`);
    0 when it was never incremented."""
    pattern = re.compile(
        rf"^{re.escape(name)}{re.escape('{' + labels + '}' if labels else '')}"
        r" (\S+)$",
        re.M,
    )
    match = pattern.search(op.metrics())
    return float(match.group(1)) if match else 0.0


def setup_mirror(
    cp: ControlPlane, ns: str, remote: BareRemote, *rules: dict[str, Any], **target_spec: Any
) -> None:
    """A GitProvider `git` for `remote`, a GitTarget `mirror` and a WatchRule `rule` (ConfigMaps
    unless `rules` say otherwise) in `ns`."""
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror", **target_spec),
            watch_rule("rule", ns, "mirror", *(rules or (CM_RULE,))),
        )
    )


def wait_webhook_registered(cp: ControlPlane, name: str = "kubescribe-attribution") -> None:
    """The operator has registered its ValidatingWebhookConfiguration `name`."""

    def registered() -> bool:
        done = cp.kubectl("get", "validatingwebhookconfiguration", name, check=False)
        return done.returncode == 0

    wait_for(registered, timeout=30, what=f"ValidatingWebhookConfiguration {name}")


async def until(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """`wait_for` for async tests: poll `cond` on the event loop until it holds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


class WorkerHarness:
    """One branch worker and everything it reported: write reports, the cursors of each push
    and, with a `remote`, the files the remote held at each push."""

    def __init__(
        self,
        url: str,
        cache: Path,
        *,
        branch: str = "main",
        remote: BareRemote | None = None,
        targets: Sequence[TargetConfig] = (),
        **options: Any,
    ) -> None:
        self.remote = remote
        self.reports: list[WriteReport] = []
        self.acks: list[list[Cursor]] = []
        self.files_at_ack: list[set[str]] = []
        self.worker = BranchWorker(
            url,
            branch,
            cache_dir=cache,
            committer=COMMITTER,
            on_report=self.reports.append,
            on_pushed=self._pushed,
            **options,
        )
        if targets:
            self.worker.configure(list(targets))

    def _pushed(self, cursors: list[Cursor]) -> None:
        self.acks.append(cursors)
        if self.remote is not None:
            self.files_at_ack.append(set(self.remote.files(self.worker.branch)))

    @property
    def acked(self) -> set[Cursor]:
        return {c for batch in self.acks for c in batch}

    async def settle(self, *items: Change | Snapshot) -> None:
        """Submit and wait until every item is acknowledged or reported on."""
        before = len(self.reports)
        for item in items:
            self.worker.submit(item)
        await until(
            lambda: (
                self.worker.pending == 0
                and len(self.reports) > before
                and all(i.cursor in self.acked for i in items)
            ),
            "items to be written",
        )

    async def written(self, *items: Change | Snapshot) -> None:
        """Wait until every item (already submitted) is pushed."""
        await until(lambda: all(i.cursor in self.acked for i in items), "items to be pushed")

    def last(self, key: TargetKey = TARGET) -> WriteReport:
        return [r for r in self.reports if r.target == key][-1]
