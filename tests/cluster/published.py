"""The release as `hack/release.sh` publishes it, to the CNCF distribution registry on loopback
(devenv.registry) that the test cluster's containerd pulls from: used by the release test and by
the quickstart, which installs the chart from it as a user would."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubescribe_devenv.cluster import Cluster, ClusterTools
from kubescribe_devenv.controlplane import REPO_ROOT
from kubescribe_devenv.registry import Registry
from tests.support import record_figure

# The architectures released here, as hack/release.sh defaults to (the arm64 image is built
# without emulation by `hack/build-image.sh --arch arm64`).
ARCHES = ("amd64", "arm64")
VERSION = next(
    line.split('"')[1]
    for line in (REPO_ROOT / "pyproject.toml").read_text().splitlines()
    if line.startswith("version = ")
)
PASSWORD = "kubescribe-test-release-key"
INDEX = "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class Published:
    registry: Registry
    out: Path
    info: dict[str, Any]
    public_key: Path
    other_public_key: Path
    cosign: Path
    env: dict[str, str]  # cosign's TUF cache in the test's directory, not in $HOME

    @property
    def image(self) -> str:
        return f"{self.info['image']['repository']}@{self.info['image']['digest']}"

    @property
    def chart(self) -> str:
        return f"{self.info['chart']['repository']}@{self.info['chart']['digest']}"

    def verify(self, *args: str, key: Path | None = None) -> subprocess.CompletedProcess[str]:
        """`cosign verify...` as docs/releasing.md shows it, against the loopback registry."""
        return subprocess.run(
            [str(self.cosign), *args[:1], "--key", str(key or self.public_key),
             "--insecure-ignore-tlog=true", "--allow-http-registry", "--allow-insecure-registry",
             *args[1:]],
            capture_output=True, text=True, check=False, timeout=120, env=self.env,
        )  # fmt: skip


def run(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(
        argv, capture_output=True, text=True, check=False, env=env, cwd=cwd, timeout=1800
    )
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr[-4000:]}"
    return done.stdout


@contextlib.contextmanager
def publish(cluster: Cluster, tools: ClusterTools, work: Path) -> Iterator[Published]:
    """`hack/release.sh` of this version to a registry on loopback that the node pulls from,
    signed with a key made here; the registry serves while the context lasts."""
    cosign = Path(run("bash", str(REPO_ROOT / "hack" / "build-cosign.sh")).split()[-1]) / "cosign"
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD, "TUF_ROOT": str(work / "tuf")}
    for prefix in ("release", "other"):
        run(str(cosign), "generate-key-pair", "--output-key-prefix", prefix, env=env, cwd=work)
    with Registry(work / "registry") as registry:
        cluster.use_host_registry(registry.port)
        env.update(
            REGISTRY=f"{registry.host}/kubescribe",
            COSIGN_KEY=str(work / "release.key"),
            ARCHES=" ".join(ARCHES),
            OUT=str(work / "out"),
            HELM=str(tools.helm),
            KUBESCRIBE_CLUSTER_DIR=str(tools.root),
            HELM_CONFIG_HOME=str(work / "helm"),
            HELM_CACHE_HOME=str(work / "helm"),
            HELM_DATA_HOME=str(work / "helm"),
        )
        t0 = time.monotonic()
        out = run("bash", str(REPO_ROOT / "hack" / "release.sh"), VERSION, env=env)
        record_figure(
            f"release ({' '.join(ARCHES)}, image cached)", time.monotonic() - t0, "cluster"
        )
        out_dir = Path(out.split()[-1])
        yield Published(
            registry,
            out_dir,
            json.loads((out_dir / "release.json").read_text()),
            work / "release.pub",
            work / "other.pub",
            cosign,
            {**os.environ, "TUF_ROOT": str(work / "tuf")},
        )
