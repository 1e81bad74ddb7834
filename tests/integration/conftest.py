"""Fixtures of the integration tests: branch workers against the `remote` bare repository."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from kubescribe.git.targets import TargetConfig
from kubescribe_devenv.gitremote import BareRemote
from tests.builders import target
from tests.support import WorkerHarness


@pytest.fixture
async def make(remote: BareRemote, tmp_path: Path) -> AsyncIterator[Callable[..., WorkerHarness]]:
    """A factory of started workers on `remote` (configured with `targets`, or one default
    target); each is stopped at the end of the test."""
    started: list[WorkerHarness] = []

    def factory(
        *targets: TargetConfig, cache: str = "cache", branch: str = "main", start: bool = True
    ) -> WorkerHarness:
        h = WorkerHarness(remote.url, tmp_path / cache, branch=branch, remote=remote)
        h.worker.configure(list(targets) or [target()])
        if start:
            h.worker.start()
        started.append(h)
        return h

    yield factory
    for h in started:
        await h.worker.stop(timeout=5)
