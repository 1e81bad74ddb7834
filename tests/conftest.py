"""Shared fixtures: a real control plane, a real Redis, a real bare Git remote, a real
Alertmanager."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from kubescribe_devenv import alertmanager as am
from kubescribe_devenv import kustomize
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from kubescribe_devenv.redis import RedisServer
from tests.ci_guard import pytest_runtest_makereport, pytest_terminal_summary

__all__ = ["pytest_runtest_makereport", "pytest_terminal_summary"]  # hooks of this conftest

# Shared 2-core machines run control planes beside the property tests: time limits per example
# would make them flaky without making them stronger.
settings.register_profile("kubescribe", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kubescribe")


@pytest.fixture(scope="session")
def controlplane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One kube-apiserver + etcd per test worker (random ports, own temp dir).

    Logs of a failed session are kept under the pytest temp dir (`controlplane*/`).
    Tests that need kube-apiserver flags of their own (audit webhook) start a `ControlPlane`
    directly with `ControlPlane(audit=AuditWebhook(...))`.
    """
    workdir = tmp_path_factory.mktemp("controlplane")
    cp = ControlPlane(workdir=workdir, keep_workdir=True)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def namespace(controlplane: ControlPlane, request: pytest.FixtureRequest) -> str:
    """A fresh namespace per test (there is no namespace controller to empty deleted ones)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    controlplane.kubectl("create", "namespace", name)
    return name


@pytest.fixture(scope="session")
def kbin() -> Path:
    """The kustomize binary (built once per machine)."""
    try:
        return kustomize.binary()
    except kustomize.KustomizeMissing:
        pytest.skip("kustomize could not be built (Go missing?)")


@pytest.fixture
def remote(tmp_path: Path) -> BareRemote:
    """A bare repository with one empty commit on `main`, reachable over file://."""
    return BareRemote.create(tmp_path / "remote.git")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[am.Alertmanager]:
    """One Alertmanager per test worker, built from its Go module (hack/build-alertmanager.sh);
    tests tell their alerts apart by their `alert` label (`namespace/name` of the Alert)."""
    try:
        binary = am.binary()
    except am.AlertmanagerMissing as exc:
        pytest.skip(f"Alertmanager could not be built (Go missing?): {exc}")
    with am.Alertmanager(binary, tmp_path_factory.mktemp("alertmanager")) as server:
        yield server
