"""End-to-end fixtures: CRDs installed once per control plane, the operator as a process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kubescribe.api.crds import render_crds
from kubescribe.devenv.controlplane import ControlPlane
from kubescribe.devenv.httpgit import HttpsGitServer, missing_binaries
from tests.manifests import PASSWORD
from tests.support import Operator, operators

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="session")
def crds(controlplane: ControlPlane) -> ControlPlane:
    controlplane.apply(render_crds())
    controlplane.wait_established(
        *(
            f"{plural}.kubescribe.io"
            for plural in (
                "gitproviders",
                "gittargets",
                "watchrules",
                "clusterwatchrules",
                "commitrequests",
                "clusterproviders",
            )
        )
    )
    return controlplane


@pytest.fixture
def operator(
    crds: ControlPlane, tmp_path: Path, namespace: str
) -> Iterator[Callable[..., Operator]]:
    """Start `kubescribe run` (call it; extra CLI args allowed; file:// remotes allowed unless
    `allow_file_urls=False`). Stopped and cleaned up after."""
    with operators(crds, tmp_path / "operator") as start:
        yield start
    crds.kubectl(
        "delete",
        "gitproviders,gittargets,watchrules,commitrequests",
        "--all",
        "-n",
        namespace,
        "--wait=false",
        check=False,
    )


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsGitServer]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (Debian packages nginx, fcgiwrap)")
    with HttpsGitServer(tmp_path_factory.mktemp("https")) as server:
        server.add_user("writer", PASSWORD)
        server.add_user("reader", PASSWORD, read_only=True)
        yield server
