"""A GitTarget's own commit window and message templates (`spec.commit`), end to end: a real
kube-apiserver, the operator process, a real file:// remote, two targets on one branch."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import CM_RULE, cm_path, configmap, provider, target, watch_rule
from tests.support import Operator, manifest, wait_condition, wait_for, wait_ready

pytestmark = pytest.mark.controlplane


def two_targets(
    cp: ControlPlane, ns: str, remote: BareRemote, commit: Mapping[str, object]
) -> None:
    """`own` with `spec.commit`, `plain` without: both on `main` of one provider (window 0s)."""
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("own", ns, "git", "own", commit=commit),
            target("plain", ns, "git", "plain"),
            watch_rule("own", ns, "own", CM_RULE),
            watch_rule("plain", ns, "plain", CM_RULE),
        )
    )


def test_a_target_groups_and_words_its_commits_while_its_branch_neighbour_keeps_the_provider_s(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    commit = {
        "commitWindow": "3s",
        "message": {"change": "own: {operation} {ref}", "group": "{count} in {target}"},
    }
    two_targets(cp, ns, remote, commit)
    wait_ready(cp, ns, "own")
    wait_ready(cp, ns, "plain")
    commits = len(remote.log())

    names = [f"burst-{i}" for i in range(3)]
    cp.apply(manifest(*(configmap(n, ns, {"n": n}) for n in names)))
    wanted = {cm_path(ns, n, folder) for n in names for folder in ("own", "plain")}
    wait_for(lambda: wanted <= set(remote.files()), timeout=30, what="the burst in both folders")
    wait_for(lambda: len(remote.log()) >= commits + 4, timeout=30, what="four commits")

    messages = [c["message"] for c in remote.log()[: len(remote.log()) - commits]]
    grouped = [m for m in messages if m.startswith("3 in ")]
    assert grouped == [
        f"3 in {ns}/own\n\n" + "\n".join(f"own: CREATE {ns}/{n}" for n in names)
    ]  # the target's window and both of its templates
    plain = sorted(m for m in messages if not m.startswith("3 in "))
    assert plain == [f"CREATE ConfigMap {ns}/{n}" for n in names]  # the provider's, one by one
    assert len(messages) == 4


@pytest.mark.parametrize(
    "message",
    [
        {"change": "{nope}"},
        {"group": "{count:>999999999}"},  # a format spec: unbounded padding
        {"snapshot": "{0}"},
        {"change": "{name!r}"},
        {"group": "{"},
    ],
)
def test_a_bad_template_of_one_target_is_its_condition_and_its_neighbour_still_writes(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    message: dict[str, str],
) -> None:
    cp, ns = crds, namespace
    op = operator()
    two_targets(cp, ns, remote, {"message": message})
    cond = wait_condition(cp, "gittarget", "own", ns, "Ready", "False", "InvalidTemplate")
    assert cond["message"].startswith(f"spec.commit.message.{next(iter(message))}: ")
    wait_ready(cp, ns, "plain")
    cp.kubectl("create", "configmap", "after", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: cm_path(ns, "after", "plain") in remote.files(), timeout=30, what="plain")
    assert not any(f.startswith("own/") for f in remote.files())
    assert op.proc is not None
    assert op.proc.poll() is None
