"""docs/quickstart.md runs as written: its ```sh blocks, in order, with bash, against the test
cluster, until the change a named user makes is a commit on the SSH remote authored by them.

What is replaced, and nothing else:

- the settings block (`<!-- quickstart: settings -->`): the test exports the same variables,
  naming the release's registry on loopback (`hack/release.sh`, as in the release test: the
  chart and the image are pulled from it) and the SSH Git server fixture as the remote;
- `--plain-http` is added after the chart's location (`DOC_CHART`): the loopback registry
  speaks HTTP;
- the cluster: `KUBECONFIG` is the kubeconfig of user `alice` (bound to cluster-admin, as the
  creator of a kind cluster is), so the change is hers;
- the block marked `<!-- quickstart: skip-in-test -->` (kind/k3d cluster creation) is skipped.

Two things of this test cluster that a kind cluster does not need are handled around the doc,
not in it: the API server reaches no Service (no kube-proxy), so the webhook is also published
on the node (`CLUSTER_VALUES`, added after the chart); and the host has no route to the node
address where Pods reach the Git server, so `ssh-keyscan` runs in the cluster's network
namespace. The deploy key the user adds on their forge by hand is authorized on the SSH server
after the block that makes it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubescribe.api.crds import crd_manifests
from kubescribe_devenv.cluster import NODE_IP, Cluster, ClusterTools
from kubescribe_devenv.controlplane import REPO_ROOT
from kubescribe_devenv.sshgit import SshGitServer
from tests.cluster.conftest import NAMESPACE, record
from tests.cluster.published import VERSION, Published
from tests.support import wait_for

# The chart comes from the release on the loopback registry (shared with the release test).
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900), pytest.mark.xdist_group("release")]

DOC = REPO_ROOT / "docs" / "quickstart.md"
SKIP = "<!-- quickstart: skip-in-test -->"
SETTINGS = "<!-- quickstart: settings -->"
DOC_CHART = "oci://$REGISTRY/charts/kubescribe --version $VERSION"
MAX_COMMANDS = 10
USER = "alice"
CLUSTER_VALUES = (
    "--set admission.hostPort=9444"
    f" --set admission.url=https://{NODE_IP}:9444/validate-commitrequests"
    f" --set 'certificates.extraSANs={{{NODE_IP}}}'"
)
_BLOCK = re.compile(r"(?:^(<!-- quickstart: [a-z-]+ -->)\n)?^```sh\n(.*?)^```$", re.M | re.S)
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


@dataclass(frozen=True)
class Block:
    marker: str | None
    script: str


def blocks(text: str) -> list[Block]:
    """The ```sh blocks of `text`, with the marker comment on the line before, if any."""
    return [Block(m[1], m[2]) for m in _BLOCK.finditer(text)]


def commands(script: str) -> list[str]:
    """The commands of a shell block: continued lines joined, here-document bodies dropped,
    blank lines and comments skipped."""
    found: list[str] = []
    lines = iter(script.splitlines())
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        command = line
        while command.endswith("\\"):
            command = command[:-1] + next(lines, "")
        found.append(command)
        for heredoc in _HEREDOC.finditer(command):
            end = heredoc[2]
            for body in lines:
                if body.strip() == end:
                    break
    return found


def exported(script: str) -> set[str]:
    """The variable names a settings block exports."""
    names: set[str] = set()
    for command in commands(script):
        words = shlex.split(command)
        assert words[0] == "export", command
        names.update(word.split("=", 1)[0] for word in words[1:])
    return names


def test_the_quickstart_has_at_most_ten_commands() -> None:
    doc = blocks(DOC.read_text())
    counted = [c for block in doc for c in commands(block.script)]
    assert 0 < len(counted) <= MAX_COMMANDS, counted
    skipped = [b for b in doc if b.marker == SKIP]
    assert [commands(b.script)[0].split()[:3] for b in skipped] == [["kind", "create", "cluster"]]
    assert [b.marker for b in doc if b.marker] == [SETTINGS, SKIP]
    assert sum(b.script.count(DOC_CHART) for b in doc) == 1


def test_commands_are_counted_as_a_reader_counts_them() -> None:
    script = "a \\\n  b\n# note\n\nkubectl apply -f - <<'EOF'\nx: 1\n  y\nEOF\nc\n"
    assert commands(script) == ["a   b", "kubectl apply -f - <<'EOF'", "c"]


@pytest.fixture
def quickstart_cleanup(cluster: Cluster) -> Iterator[None]:
    # The quickstart starts from an empty cluster: the CRDs other tests' releases kept on
    # uninstall (crds.keep) would make its plain `helm install` refuse to adopt them.
    crds = [f"crd/{crd['metadata']['name']}" for crd in crd_manifests()]
    cluster.kubectl("delete", *crds, "--ignore-not-found", check=False)
    yield
    cluster.helm("uninstall", "kubescribe", "-n", NAMESPACE, "--wait", "--timeout=60s", check=False)
    for args in (
        ("namespace", "demo"),
        ("clusterrolebinding", f"quickstart-{USER}"),
    ):  # the change webhook's configuration goes with the release (owned by its ClusterRole)
        cluster.kubectl("delete", *args, "--ignore-not-found", "--wait=false", check=False)


def _shims(where: Path, tools: ClusterTools, cluster: Cluster) -> Path:
    """kubectl and helm of the test cluster's tools; ssh-keyscan in its network namespace."""
    where.mkdir()
    (where / "kubectl").symlink_to(tools.kubectl)
    (where / "helm").symlink_to(tools.helm)
    keyscan = shutil.which("ssh-keyscan")
    assert keyscan is not None, "ssh-keyscan is not installed (Debian package openssh-client)"
    shim = where / "ssh-keyscan"
    shim.write_text(
        f'#!/bin/sh\nexec nsenter --net=/proc/{cluster.holder_pid}/ns/net {keyscan} "$@"\n'
    )
    shim.chmod(0o755)
    return where


def test_the_quickstart_runs_as_written_to_a_commit_by_the_user(
    cluster: Cluster,
    tools: ClusterTools,
    published: Published,
    ssh_git: SshGitServer,
    tmp_path: Path,
    quickstart_cleanup: None,
) -> None:
    remote = ssh_git.create_repo("quickstart")
    cluster.kubectl(
        "create", "clusterrolebinding", f"quickstart-{USER}", "--clusterrole=cluster-admin",
        f"--user={USER}",
    )  # fmt: skip
    registry = f"{published.registry.host}/kubescribe"
    assert published.info["chart"]["repository"] == f"{registry}/charts/kubescribe"
    settings = {
        "REGISTRY": registry,
        "VERSION": VERSION,
        "GIT_HOST": NODE_IP,
        "GIT_PORT": str(ssh_git.port),
        "REPO": f"ssh://{ssh_git.user}@{NODE_IP}:{ssh_git.port}{remote.path}",
    }
    bin_dir = _shims(tmp_path / "bin", tools, cluster)
    env = {
        **os.environ,
        **settings,
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "KUBECONFIG": str(cluster.user_kubeconfig(USER)),
        "HELM_CACHE_HOME": str(tmp_path / "helm" / "cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "helm" / "config"),
        "HELM_DATA_HOME": str(tmp_path / "helm" / "data"),
    }
    work = tmp_path / "work"
    work.mkdir()
    ran: list[str] = []
    t0 = time.monotonic()
    for block in blocks(DOC.read_text()):
        if block.marker == SKIP:
            continue
        if block.marker == SETTINGS:
            assert exported(block.script) == set(settings)
            continue
        # a registry on loopback speaks plain HTTP, which helm must be told
        script = block.script.replace(DOC_CHART, f"{DOC_CHART} --plain-http {CLUSTER_VALUES}")
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=work, env=env, capture_output=True, text=True, timeout=360, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (
            f"{script}\nexit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            f"\n{_operator_logs(cluster)}"
        )
        ran.extend(commands(block.script))
        if "ssh-keygen" in block.script:  # the user adds the deploy key on their forge
            ssh_git.authorize((work / "deploy-key.pub").read_text())
    assert any(c.startswith("kubectl -n demo create configmap hello") for c in ran)

    path = "clusters/dev/demo/core/configmaps/hello.yaml"

    def commit_of_the_change() -> dict[str, str] | None:
        for commit in remote.log():
            changed = subprocess.run(
                ["git", "diff-tree", "--root", "--no-commit-id", "--name-only", "-r",
                 commit["sha"]],
                cwd=remote.path, capture_output=True, text=True, check=True,
            ).stdout.split()  # fmt: skip
            if path in changed:
                return commit
        return None

    commit = wait_for(commit_of_the_change, timeout=60, what="the commit of the ConfigMap")
    record("quickstart: helm install to the user's commit", time.monotonic() - t0)
    assert commit["author"] == USER, commit
    assert commit["committer"] != USER
    assert "greeting: hello" in remote.read(path)


def _operator_logs(cluster: Cluster) -> str:
    got = cluster.kubectl(
        "logs", "-n", NAMESPACE, "-l", "app.kubernetes.io/instance=kubescribe", "--tail=40",
        check=False,
    )  # fmt: skip
    return got.stdout + got.stderr
