"""Helpers for end-to-end tests: wait on conditions, run the operator as a real process."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from kubescribe.devenv.controlplane import ControlPlane
from kubescribe.devenv.operator import OperatorProcess

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


def condition(
    cp: ControlPlane, kind: str, name: str, namespace: str | None, ctype: str
) -> dict[str, Any] | None:
    args = [kind, name] + (["-n", namespace] if namespace else [])
    obj = cp.get_json(*args)
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return dict(cond)
    return None


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


def wait_webhook_registered(cp: ControlPlane, name: str = "kubescribe-attribution") -> None:
    """The operator has registered its ValidatingWebhookConfiguration `name`."""

    def registered() -> bool:
        done = cp.kubectl("get", "validatingwebhookconfiguration", name, check=False)
        return done.returncode == 0

    wait_for(registered, timeout=30, what=f"ValidatingWebhookConfiguration {name}")
