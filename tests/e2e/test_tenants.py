"""Two tenants on one operator, each acting under its own RBAC identity (not system:masters).

A namespace is the trust boundary: tenant B can neither read tenant A's namespace through a
WatchRule nor push through A's credentials to A's repository, and A's mirror keeps working
while B tries.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.httpgit import HttpsGitServer
from tests.manifests import (
    CM_RULE,
    PASSWORD,
    configmap,
    https_secret,
    provider,
    secret,
    target,
    watch_rule,
)
from tests.support import Operator, condition, manifest, operators, stays, wait_condition, wait_for

pytestmark = pytest.mark.controlplane

TENANT_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "Role",
    "rules": [
        {
            "apiGroups": ["kubescribe.io"],
            "resources": ["gitproviders", "gittargets", "watchrules", "commitrequests"],
            "verbs": ["*"],
        },
        {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["*"]},
    ],
}


class Tenant:
    """A namespace and a user who may manage kubescribe objects, ConfigMaps and Secrets in it."""

    def __init__(self, cp: ControlPlane, label: str) -> None:
        self.cp = cp
        self.ns = f"{label}-{uuid.uuid4().hex[:6]}"
        self.user = f"{label}-admin"
        cp.kubectl("create", "namespace", self.ns)
        role = {**TENANT_ROLE, "metadata": {"name": "kubescribe-tenant", "namespace": self.ns}}
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "kubescribe-tenant", "namespace": self.ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "kubescribe-tenant",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": self.user}
            ],
        }
        cp.apply(manifest(role, binding))
        self.kubeconfig = cp.user_kubeconfig(self.user)

    def kubectl(self, *args: str, check: bool = True) -> str:
        done = self.cp.kubectl(*args, kubeconfig=self.kubeconfig, check=check)
        return done.stdout + done.stderr

    def apply(self, *docs: dict[str, object]) -> None:
        self.cp.kubectl("apply", "-f", "-", input=manifest(*docs), kubeconfig=self.kubeconfig)


@pytest.fixture
def tenants(crds: ControlPlane) -> Iterator[tuple[Tenant, Tenant]]:
    a, b = Tenant(crds, "team-a"), Tenant(crds, "team-b")
    yield a, b
    for t in (a, b):
        crds.kubectl(
            "delete", "gitproviders,gittargets,watchrules", "--all", "-n", t.ns, check=False
        )


@pytest.fixture
def start_operator(crds: ControlPlane, tmp_path: Path) -> Iterator[Callable[..., Operator]]:
    with operators(crds, tmp_path / "operator") as start:
        yield start


def paths_in_history(remote: BareRemote) -> set[str]:
    out = git("log", "--all", "--name-only", "--format=", cwd=remote.path)
    return {line for line in out.splitlines() if line}


def cm_file(folder: str, ns: str, name: str) -> str:
    return f"{folder}/{ns}/core/configmaps/{name}.yaml"


def test_tenant_b_cannot_push_through_tenant_a_and_a_keeps_mirroring(
    tenants: tuple[Tenant, Tenant],
    https_server: HttpsGitServer,
    start_operator: Callable[..., Operator],
) -> None:
    a, b = tenants
    repo = https_server.create_repo(f"{a.ns}-repo")
    url = https_server.url_for(repo.path.name)
    start_operator()
    a.apply(
        https_secret("git-creds", a.ns, https_server, "writer", PASSWORD),
        provider("git", a.ns, url, secretRef={"name": "git-creds"}),
        target("mirror", a.ns, "git", "team-a"),
        watch_rule("rule", a.ns, "mirror", CM_RULE),
        configmap("a1", a.ns, {"v": "1"}),
    )
    wait_for(lambda: cm_file("team-a", a.ns, "a1") in repo.files(), timeout=90, what="A mirrored")

    # B knows A's repository URL and trusts its CA, but holds no credential of its own.
    b.apply(
        secret("guess", b.ns, {"ca.crt": https_server.ca_pem, "username": "writer"}),
        provider("git", b.ns, url, secretRef={"name": "guess"}),
        target("mirror", b.ns, "git", "team-b"),
        watch_rule("rule", b.ns, "mirror", CM_RULE),
        configmap("b1", b.ns, {"v": "1"}),
    )
    refused = wait_condition(a.cp, "gittarget", "mirror", b.ns, "Ready", "False", timeout=90)
    assert refused["reason"] == "AuthenticationFailed", refused

    a.apply(configmap("a1", a.ns, {"v": "2"}))  # A's mirror keeps working while B exists
    wait_for(
        lambda: yaml.safe_load(repo.read(cm_file("team-a", a.ns, "a1")))["data"] == {"v": "2"},
        timeout=60,
        what="A's update pushed",
    )
    assert not any(p.startswith("team-b/") for p in paths_in_history(repo))
    ready = condition(a.cp, "gittarget", "mirror", a.ns, "Ready")
    assert ready is not None
    assert ready["status"] == "True"


def test_cross_namespace_sources_need_a_grant_only_an_administrator_can_give(
    tenants: tuple[Tenant, Tenant],
    crds: ControlPlane,
    tmp_path: Path,
    start_operator: Callable[..., Operator],
) -> None:
    a, b = tenants
    cp = crds
    remote = BareRemote.create(tmp_path / "b.git")
    a.apply(configmap("a-private", a.ns, {"token": "a-only"}))
    op = start_operator()
    reach_into_a = {**CM_RULE, "sourceNamespace": a.ns}
    b.apply(
        provider("git", b.ns, remote.url),
        target("mirror", b.ns, "git", "b"),
        watch_rule("rule", b.ns, "mirror", CM_RULE, reach_into_a),
        configmap("b1", b.ns, {"v": "1"}),
    )
    refused = wait_condition(
        cp, "watchrule", "rule", b.ns, "SourceNamespaceAuthorized", "False", timeout=60
    )
    assert refused["reason"] == "SourceNamespaceNotAuthorized"
    assert a.ns in refused["message"]
    ready = condition(cp, "watchrule", "rule", b.ns, "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "SourceNamespaceNotAuthorized")
    # B's own namespace flows; nothing of A's does.
    wait_for(lambda: cm_file("b", b.ns, "b1") in remote.files(), timeout=60, what="B mirrored")
    stays(lambda: not any(a.ns in p for p in paths_in_history(remote)), 2, "nothing of A in Git")

    # B cannot grant itself A's namespace: Namespaces are not a tenant's to edit.
    out = b.kubectl(
        "annotate", "namespace", a.ns, f"kubescribe.io/watchable-from={b.ns}", check=False
    )
    assert "forbidden" in out.lower()

    # The administrator grants it: the stream opens and A's ConfigMap is mirrored into B's repo.
    cp.kubectl("annotate", "namespace", a.ns, f"kubescribe.io/watchable-from={b.ns}")
    wait_condition(cp, "watchrule", "rule", b.ns, "SourceNamespaceAuthorized", "True")
    wait_for(lambda: cm_file("b", a.ns, "a-private") in remote.files(), timeout=60, what="granted")

    # The lockdown flag refuses cross-namespace sources whatever the Namespaces grant.
    op.stop()
    start_operator("--no-cross-namespace-sources")
    locked = wait_condition(
        cp,
        "watchrule",
        "rule",
        b.ns,
        "SourceNamespaceAuthorized",
        "False",
        "CrossNamespaceSourcesDisabled",
        timeout=60,
    )
    assert "disabled" in locked["message"]
    status = json.loads(cp.kubectl("get", "watchrule", "rule", "-n", b.ns, "-o", "json").stdout)
    assert status["status"]["observedGeneration"] == status["metadata"]["generation"]


def test_generate_when_missing_never_writes_into_a_secret_it_did_not_create(
    tenants: tuple[Tenant, Tenant],
    crds: ControlPlane,
    tmp_path: Path,
    start_operator: Callable[..., Operator],
) -> None:
    """A tenant who may create GitProviders but not edit a Secret cannot make the operator add
    keys to it: generateWhenMissing only creates Secrets (or fills ones it created)."""
    a, _ = tenants
    cp = crds
    cp.apply(manifest(secret("app-tls", a.ns, {"tls.key": "not-for-kubescribe"})))
    before = cp.get_json("secret", "app-tls", "-n", a.ns)["metadata"]["resourceVersion"]
    remote = BareRemote.create(tmp_path / "a.git")
    start_operator()
    a.apply(
        provider(
            "git",
            a.ns,
            remote.url,
            signing={"secretRef": {"name": "app-tls"}, "generateWhenMissing": True},
        ),
        provider("plain", a.ns, remote.url, push={"commitWindow": "0s"}),
        target("signed", a.ns, "git", "signed"),
        target(
            "encrypted",
            a.ns,
            "plain",
            "encrypted",
            encryption={"ageKeySecretRef": {"name": "app-tls"}, "generateWhenMissing": True},
        ),
    )
    signing = wait_condition(cp, "gitprovider", "git", a.ns, "SigningKeyLoaded", "False")
    assert "not created by kubescribe" in signing["message"]
    encryption = wait_condition(
        cp, "gittarget", "encrypted", a.ns, "EncryptionConfigured", "False", "InvalidKey"
    )
    assert "not created by kubescribe" in encryption["message"]
    after = cp.get_json("secret", "app-tls", "-n", a.ns)
    assert after["metadata"]["resourceVersion"] == before
    assert set(after["data"]) == {"tls.key"}


READER = "kubescribe-reader"
MANAGE = ["get", "list", "watch", "create", "update", "patch", "delete"]  # not escalate, bind


def role(name: str, ns: str, *rules: dict[str, list[str]]) -> dict[str, object]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": ns},
        "rules": list(rules),
    }


def role_binding(name: str, ns: str, subject: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [subject],
    }


def test_a_watch_rule_mirrors_no_kind_its_namespace_may_not_read(
    tenants: tuple[Tenant, Tenant], start_operator: Callable[..., Operator], tmp_path: Path
) -> None:
    a, _ = tenants
    cp = a.cp
    # A tenant who manages RBAC in its namespace (it cannot read Services there).
    rbac = {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"]}
    accounts = {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["*"]}
    user = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": a.user}
    cp.apply(
        manifest(
            role("rbac-admin", a.ns, {**rbac, "verbs": MANAGE}, accounts),
            role_binding("rbac-admin", a.ns, user),
        )
    )
    assert "forbidden" in a.kubectl("get", "services", "-n", a.ns, check=False)
    reader = {"kind": "ServiceAccount", "name": READER, "namespace": a.ns}
    read = {"verbs": ["get", "list", "watch"], "apiGroups": [""]}
    a.apply(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": READER, "namespace": a.ns},
        },
        role(READER, a.ns, {**read, "resources": ["configmaps"]}),
        role_binding(READER, a.ns, reader),
    )
    # RBAC lets it grant its ServiceAccount only what it holds itself.
    widened = manifest(role(READER, a.ns, {**read, "resources": ["configmaps", "services"]}))
    refused = cp.kubectl("apply", "-f", "-", input=widened, kubeconfig=a.kubeconfig, check=False)
    assert "forbidden" in refused.stderr

    cp.apply(
        manifest(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "internal", "namespace": a.ns},
                "spec": {"ports": [{"port": 80}]},
            }
        )
    )
    remote = BareRemote.create(tmp_path / "a.git")
    start_operator(f"--tenant-service-account={READER}")
    a.apply(
        provider("git", a.ns, remote.url),
        target("mirror", a.ns, "git", "team-a"),
        watch_rule("cms", a.ns, "mirror", CM_RULE),
        watch_rule("svcs", a.ns, "mirror", {"apiGroups": [""], "resources": ["services"]}),
        configmap("a1", a.ns, {"v": "1"}),
    )
    wait_for(lambda: cm_file("team-a", a.ns, "a1") in remote.files(), timeout=90, what="mirrored")
    cond = wait_condition(
        cp, "watchrule", "svcs", a.ns, "ReadAuthorized", "False", "RuleNotAuthorized"
    )
    assert cond["message"] == (
        f"ServiceAccount {READER!r} of namespace {a.ns!r} may not list and watch core/v1/services "
        f"in namespace {a.ns!r}: not mirrored"
    )
    wait_condition(cp, "watchrule", "cms", a.ns, "ReadAuthorized", "True", "ReadAuthorized")
    status = cp.get_json("gittarget", "mirror", "-n", a.ns)["status"]
    assert status["streams"] == 1  # ConfigMaps only
    assert not any("/services/" in p for p in paths_in_history(remote))
