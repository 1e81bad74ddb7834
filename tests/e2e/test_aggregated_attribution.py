"""Attribution of an aggregated API's changes: a real extension API server behind
kube-apiserver's aggregator, whose proxied writes reach the audit stream without objects."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator

import pytest

from kubescribe.mirror.authors import UNRESOLVED
from kubescribe_devenv.aggregated import AGGREGATOR_ARGS, API_VERSION, GROUP, KIND, AggregatedServer
from kubescribe_devenv.gitremote import BareRemote, git
from tests.e2e.conftest import MASTERS, Audited, audited_plane
from tests.e2e.test_attribution import ATTRIBUTED, audit_flowing
from tests.manifests import provider, target, watch_rule
from tests.support import Operator, manifest, metric, wait_for, wait_ready

pytestmark = pytest.mark.controlplane

ALICE_EXTRA = ("example.org/name=Alice Liddell", "example.org/email=alice@example.org")


@pytest.fixture(scope="module")
def widgets_api() -> Iterator[AggregatedServer]:
    with AggregatedServer() as api:
        yield api


@pytest.fixture(scope="module")
def audited(
    tmp_path_factory: pytest.TempPathFactory, widgets_api: AggregatedServer
) -> Iterator[Audited]:
    """The attribution control plane, with the widgets API registered through the aggregator."""
    with audited_plane(tmp_path_factory, AGGREGATOR_ARGS) as plane:
        widgets_api.register(plane.cp)
        yield plane


def widget_path(ns: str, name: str) -> str:
    return f"mirror/{ns}/{GROUP}/widgets/{name}.yaml"


def widget(ns: str, name: str, size: int) -> str:
    doc = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"size": size},
    }
    return json.dumps(doc)


def kubectl_as(audited: Audited, who: str, *args: str, stdin: str | None = None) -> None:
    flags = ["--as", who, *MASTERS]
    if who == "alice":
        flags += [f"--as-user-extra={e}" for e in ALICE_EXTRA]
    audited.cp.kubectl(*args, *flags, input=stdin)


def newest(remote: BareRemote) -> tuple[str, str, str, set[str]]:
    """(author, email, subject, files) of the newest commit."""
    commit = remote.log()[0]
    files = git("show", "--name-only", "--format=", commit["sha"], cwd=remote.path)
    subject = commit["message"].splitlines()[0]
    return commit["author"], commit["author_email"], subject, set(files.split())


def test_kubectl_reaches_the_extension_server_through_the_aggregator(
    audited: Audited, widgets_api: AggregatedServer, ns: str
) -> None:
    kubectl_as(audited, "alice", "create", "--validate=false", "-f", "-", stdin=widget(ns, "k", 1))
    listed = audited.cp.kubectl("get", "widgets", "-n", ns, "-o", "name").stdout.split()
    assert listed == [f"widget.{GROUP}/k"]
    # The aggregator proxied the create with the impersonated user.
    assert ("POST", f"/apis/{GROUP}/v1/namespaces/{ns}/widgets", "alice") in widgets_api.requests


def test_creates_updates_and_deletes_of_an_aggregated_api_are_attributed(
    audited: Audited, ns: str, remote: BareRemote, start_operator: Callable[..., Operator]
) -> None:
    op = start_operator(*audited.flags())
    audited.cp.apply(
        manifest(
            provider("git", ns, remote.url, attribution=ATTRIBUTED),
            target("mirror", ns, "git", "mirror"),
            watch_rule("rule", ns, "mirror", {"apiGroups": [GROUP], "resources": ["widgets"]}),
        )
    )
    wait_ready(audited.cp, ns)
    audit_flowing(audited, op, ns)
    path = widget_path(ns, "w1")

    kubectl_as(audited, "alice", "create", "--validate=false", "-f", "-", stdin=widget(ns, "w1", 1))
    wait_for(lambda: path in remote.files(), timeout=60, what="the created widget")
    assert newest(remote) == (
        "Alice Liddell",
        "alice@example.org",
        f"CREATE Widget {ns}/w1",
        {path},
    )
    assert "Kubescribe-Author-Source: audit" in remote.log()[0]["message"]

    patch = ("patch", "widget", "w1", "-n", ns, "--type=merge", "-p", '{"spec": {"size": 2}}')
    kubectl_as(audited, "alice", *patch)
    wait_for(lambda: "size: 2" in remote.read(path), timeout=60, what="the updated widget")
    assert newest(remote) == (
        "Alice Liddell",
        "alice@example.org",
        f"UPDATE Widget {ns}/w1",
        {path},
    )

    kubectl_as(audited, "bob", "delete", "widget", "w1", "-n", ns)
    wait_for(lambda: path not in remote.files(), timeout=60, what="the deleted widget")
    assert newest(remote) == (
        "bob",
        "bob@users.kubescribe.invalid",
        f"DELETE Widget {ns}/w1",
        {path},
    )
    assert metric(op, "kubescribe_attribution_total", 'outcome="named"') >= 2

    # Two users creating at once: each commit is its creator's, or nobody's, never swapped.
    commits = len(remote.log())
    assert audited.cp.bin_dir is not None
    procs = [
        subprocess.Popen(
            [
                str(audited.cp.bin_dir / "kubectl"),
                f"--kubeconfig={audited.cp.kubeconfig}",
                "create",
                "--validate=false",
                "-f",
                "-",
                "--as",
                who,
                *MASTERS,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("alice", "bob")
    ]
    for proc, who in zip(procs, ("alice", "bob"), strict=True):
        _, err = proc.communicate(widget(ns, f"by-{who}", 1), timeout=60)
        assert proc.returncode == 0, err
    wanted = {widget_path(ns, "by-alice"), widget_path(ns, "by-bob")}
    wait_for(lambda: wanted <= set(remote.files()), timeout=60, what="both widgets")
    wait_for(lambda: len(remote.log()) == commits + 2, timeout=30, what="two commits")
    for commit in remote.log()[:2]:
        files = git("show", "--name-only", "--format=", commit["sha"], cwd=remote.path).split()
        [created] = files
        creator = created.rsplit("/", 1)[1].removeprefix("by-").removesuffix(".yaml")
        assert commit["author"] in (creator, UNRESOLVED.name), (created, commit["author"])
