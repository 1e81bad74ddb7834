"""The generated CRDs on a real kube-apiserver: accepted, defaulted, and rejecting bad specs."""

from __future__ import annotations

import json
import subprocess
from typing import TYPE_CHECKING, Any

import pytest

from kubescribe.api.crds import crd_manifests, render_crds
from kubescribe.api.models import (
    DEFAULT_CHANGE_MESSAGE,
    DEFAULT_GROUP_MESSAGE,
    DEFAULT_SNAPSHOT_MESSAGE,
)
from kubescribe.api.objects import (
    ClusterWatchRule,
    CommitRequest,
    GitProvider,
    GitTarget,
    WatchRule,
)

if TYPE_CHECKING:
    from kubescribe_devenv.controlplane import ControlPlane

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="module")
def cp(controlplane: ControlPlane) -> ControlPlane:
    """The control plane with the kubescribe CRDs applied and Established."""
    controlplane.kubectl("apply", "-f", "-", input=render_crds())
    names = [f"crd/{crd['metadata']['name']}" for crd in crd_manifests()]
    controlplane.wait_established(*names)
    return controlplane


def _scoped(kind: str, namespace: str) -> list[str]:
    return [] if kind == "ClusterWatchRule" else ["-n", namespace]


def _apply(
    cp: ControlPlane, kind: str, spec: dict[str, Any], namespace: str, name: str = "x"
) -> subprocess.CompletedProcess[str]:
    manifest = {"apiVersion": "kubescribe.io/v1alpha1", "kind": kind, "metadata": {"name": name}}
    return cp.kubectl(
        "apply",
        *_scoped(kind, namespace),
        "-f",
        "-",
        input=json.dumps(manifest | {"spec": spec}),
        check=False,
    )


def _get(cp: ControlPlane, kind: str, name: str, namespace: str) -> dict[str, Any]:
    args = ["get", f"{kind.lower()}.kubescribe.io", name, *_scoped(kind, namespace), "-o", "json"]
    result: dict[str, Any] = json.loads(cp.kubectl(*args).stdout)
    return result


MODELS: dict[str, type[GitProvider | GitTarget | WatchRule | ClusterWatchRule | CommitRequest]] = {
    model.__name__: model
    for model in (GitProvider, GitTarget, WatchRule, ClusterWatchRule, CommitRequest)
}
PROVIDER = {"url": "https://git.example/org/repo.git"}
TARGET = {"providerRef": {"name": "repo"}, "branch": "main"}
RULES = [{"apiGroups": [""], "resources": ["configmaps"]}]


def test_crds_are_established_and_stored_as_generated(cp: ControlPlane) -> None:
    for crd in crd_manifests():
        stored = json.loads(cp.kubectl("get", "crd", crd["metadata"]["name"], "-o", "json").stdout)
        conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
        assert conditions.get("Established") == "True"
        assert "NonStructuralSchema" not in conditions
        assert stored["spec"]["versions"] == crd["spec"]["versions"]


def test_valid_objects_are_accepted_with_defaults(cp: ControlPlane, namespace: str) -> None:
    cluster_rule = f"{namespace}-rule"
    specs: dict[tuple[str, str], dict[str, Any]] = {
        ("GitProvider", "repo"): PROVIDER,
        ("GitTarget", "site"): TARGET,
        ("WatchRule", "cms"): {"targetRef": {"name": "site"}, "rules": RULES},
        ("ClusterWatchRule", cluster_rule): {
            "targetRef": {"name": "site", "namespace": namespace},
            "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"]}],
        },
        ("CommitRequest", "save"): {"targetRef": {"name": "site"}, "message": "Release 1"},
    }
    try:
        for (kind, name), spec in specs.items():
            done = _apply(cp, kind, spec, namespace, name)
            assert done.returncode == 0, done.stderr

        stored = {kind: _get(cp, kind, name, namespace) for kind, name in specs}
        for kind, obj in stored.items():
            # the model reads the server's defaults back unchanged
            model = MODELS[kind].model_validate(obj).spec.model_dump(mode="json", exclude_none=True)
            assert {key: model[key] for key in obj["spec"]} == obj["spec"]
            assert model.keys() - obj["spec"].keys() <= {"placement"}

        commit = stored["GitProvider"]["spec"]["commit"]
        assert stored["GitProvider"]["spec"]["allowedBranches"] == ["*"]
        assert commit == {
            "committer": {"name": "kubescribe", "email": "kubescribe@users.noreply.local"},
            "message": {
                "change": DEFAULT_CHANGE_MESSAGE,
                "snapshot": DEFAULT_SNAPSHOT_MESSAGE,
                "group": DEFAULT_GROUP_MESSAGE,
            },
        }
        assert stored["GitProvider"]["spec"]["push"] == {
            "commitWindow": "5s",
            "maxChangesPerCommit": 500,
        }
        assert stored["GitProvider"]["spec"]["attribution"] == {
            "mode": "configured-author",
            "inferFromManagedFields": False,
        }
        assert stored["CommitRequest"]["spec"] == specs[("CommitRequest", "save")]
        assert stored["GitTarget"]["spec"] == TARGET | {
            "path": ".",
            "prune": {"mode": "Always"},
            "suspend": False,
            "kustomize": {
                "mode": "Auto",
                "root": ".",
                "writeUnsupported": False,
                "renderCheck": False,
            },
            "content": {
                "mode": "Owned",
                "controllers": ["kube-controller-manager", "horizontal-pod-autoscaler"],
                "keep": [],
            },
        }
        for kind in ("WatchRule", "ClusterWatchRule"):
            rule = stored[kind]["spec"]["rules"][0]
            assert (rule["apiVersions"], rule["operations"]) == (["*"], ["*"])
    finally:
        cp.kubectl("delete", "clusterwatchrule", cluster_rule, "--ignore-not-found")


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        ("GitTarget", TARGET | {"path": "clusters/prod/apps", "branch": "feature/x-1.2"}),
        ("GitTarget", TARGET | {"placement": {"default": "{namespace}/{kind}-{name}.yaml"}}),
        (
            "GitTarget",
            TARGET
            | {
                "encryption": {
                    "ageKeySecretRef": {"name": "age"},
                    "generateWhenMissing": True,
                    "sensitiveTypes": [
                        {"group": "example.io", "resource": "dbs", "paths": ["spec.password"]}
                    ],
                }
            },
        ),
        (
            "WatchRule",
            {
                "targetRef": {"name": "site"},
                "rules": [
                    {
                        "apiGroups": ["*"],
                        "resources": ["*"],
                        "operations": ["CREATE", "DELETE"],
                        "sourceNamespace": "other",
                        "labelSelector": {
                            "matchLabels": {"app": "web"},
                            "matchExpressions": [{"key": "tier", "operator": "Exists"}],
                        },
                    }
                ],
            },
        ),
        ("GitProvider", PROVIDER | {"push": {"commitWindow": "1m30s"}}),
        ("GitProvider", PROVIDER | {"push": {"commitWindow": "0s", "maxChangesPerCommit": 1}}),
        ("GitProvider", PROVIDER | {"push": {"commitWindow": "250ms"}}),
        ("GitProvider", PROVIDER | {"attribution": {"mode": "attributed-author"}}),
        (
            "GitTarget",
            TARGET
            | {
                "ignore": {
                    "changesBy": {
                        "users": ["alice", "oidc:bob@example.org"],
                        "serviceAccounts": ["flux-system/kustomize-controller", "argocd/*"],
                        "fieldManagers": ["kustomize-controller", "argocd-controller"],
                    }
                }
            },
        ),
        (
            "CommitRequest",
            {"targetRef": {"name": "site"}, "message": "Line one\n\nBody", "collectDelay": "2s"},
        ),
        (
            "GitProvider",
            PROVIDER
            | {
                "secretRef": {"name": "creds"},
                "knownHostsRef": {"kind": "ConfigMap", "name": "ssh-hosts", "key": "known_hosts"},
                "signing": {
                    "secretRef": {"name": "signer"},
                    "key": "id_ed25519",
                    "generateWhenMissing": True,
                },
            },
        ),
    ],
    ids=[
        "nested-path-and-branch",
        "placement",
        "encryption",
        "full-rule",
        "window-minutes",
        "window-zero",
        "window-millis",
        "attributed",
        "ignore-identities",
        "commit-request",
        "known-hosts-and-signing",
    ],
)
def test_edge_cases_are_accepted(
    cp: ControlPlane, namespace: str, kind: str, spec: dict[str, Any]
) -> None:
    done = _apply(cp, kind, spec, namespace)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("kind", "spec", "field"),
    [
        ("GitTarget", TARGET | {"path": "../x"}, "spec.path"),
        ("GitTarget", TARGET | {"path": "a/../x"}, "spec.path"),
        ("GitTarget", TARGET | {"path": "/abs"}, "spec.path"),
        ("GitTarget", TARGET | {"path": "a//b"}, "spec.path"),
        ("GitTarget", TARGET | {"path": "a/"}, "spec.path"),
        ("GitTarget", TARGET | {"prune": {"mode": "Sometimes"}}, "spec.prune.mode"),
        ("GitTarget", TARGET | {"kustomize": {"root": "../x"}}, "spec.kustomize.root"),
        ("GitTarget", TARGET | {"kustomize": {"root": ".git/x"}}, "spec.kustomize.root"),
        ("GitTarget", TARGET | {"kustomize": {"mode": "Sometimes"}}, "spec.kustomize.mode"),
        ("GitTarget", TARGET | {"branch": "a..b"}, "spec.branch"),
        ("GitTarget", TARGET | {"branch": "-x"}, "spec.branch"),
        ("GitTarget", TARGET | {"branch": "with space"}, "spec.branch"),
        ("GitTarget", TARGET | {"branch": "x.lock"}, "spec.branch"),
        ("GitTarget", TARGET | {"branch": "x/"}, "spec.branch"),
        ("GitTarget", TARGET | {"providerRef": {"name": "Bad_Name"}}, "spec.providerRef.name"),
        (
            "GitTarget",
            TARGET | {"placement": {"types": [{"resource": "pods", "template": "{name}.json"}]}},
            "spec.placement.types[0].template",
        ),
        ("GitTarget", TARGET | {"encryption": {"generateWhenMissing": True}}, "spec.encryption"),
        (
            "GitTarget",
            TARGET | {"encryption": {"recipients": ["ssh-ed25519 AAAA"]}},
            "spec.encryption.recipients[0]",
        ),
        (
            "GitTarget",
            TARGET
            | {"encryption": {"recipients": ["age1abc"], "sensitiveTypes": [{"resource": "dbs"}]}},
            "spec.encryption.sensitiveTypes[0]",
        ),
        (
            "WatchRule",
            {
                "targetRef": {"name": "t"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps/status"]}],
            },
            "spec.rules[0].resources[0]",
        ),
        ("WatchRule", {"targetRef": {"name": "t"}, "rules": []}, "spec.rules"),
        (
            "WatchRule",
            {"targetRef": {"name": "t"}, "rules": [RULES[0] | {"operations": ["PATCH"]}]},
            "spec.rules[0].operations[0]",
        ),
        (
            "WatchRule",
            {
                "targetRef": {"name": "t"},
                "rules": [
                    RULES[0]
                    | {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}
                ],
            },
            "spec.rules[0].labelSelector.matchExpressions[0]",
        ),
        (
            "ClusterWatchRule",
            {"targetRef": {"name": "t"}, "rules": RULES},
            "spec.targetRef.namespace",
        ),
        ("GitProvider", PROVIDER | {"push": {"commitWindow": "5"}}, "spec.push.commitWindow"),
        ("GitProvider", PROVIDER | {"push": {"commitWindow": "2h"}}, "spec.push.commitWindow"),
        (
            "GitProvider",
            PROVIDER | {"push": {"maxChangesPerCommit": 0}},
            "spec.push.maxChangesPerCommit",
        ),
        ("GitProvider", PROVIDER | {"attribution": {"mode": "audit"}}, "spec.attribution.mode"),
        (
            "GitTarget",
            TARGET | {"ignore": {"changesBy": {"serviceAccounts": ["kustomize-controller"]}}},
            "spec.ignore.changesBy.serviceAccounts[0]",
        ),
        (
            "GitTarget",
            TARGET | {"ignore": {"changesBy": {"serviceAccounts": ["*/x"]}}},
            "spec.ignore.changesBy.serviceAccounts[0]",
        ),
        (
            "GitTarget",
            TARGET | {"ignore": {"changesBy": {"fieldManagers": [""]}}},
            "spec.ignore.changesBy.fieldManagers[0]",
        ),
        ("CommitRequest", {"targetRef": {"name": "t"}}, "spec.message"),
        ("CommitRequest", {"targetRef": {"name": "t"}, "message": "  \n"}, "spec.message"),
        (
            "CommitRequest",
            {"targetRef": {"name": "t"}, "message": "m", "collectDelay": "11m"},
            "spec.collectDelay",
        ),
        (
            "GitProvider",
            PROVIDER | {"knownHostsRef": {"kind": "Pod", "name": "x"}},
            "spec.knownHostsRef.kind",
        ),
        (
            "GitProvider",
            PROVIDER | {"knownHostsRef": {"kind": "Secret", "name": "x", "key": "a/b"}},
            "spec.knownHostsRef.key",
        ),
        ("GitProvider", PROVIDER | {"signing": {"key": "k"}}, "spec.signing.secretRef"),
        (
            "GitProvider",
            PROVIDER | {"signing": {"secretRef": {"name": "Not_A_Name"}}},
            "spec.signing.secretRef.name",
        ),
    ],
)
def test_invalid_specs_are_rejected_by_the_api_server(
    cp: ControlPlane, namespace: str, kind: str, spec: dict[str, Any], field: str
) -> None:
    done = _apply(cp, kind, spec, namespace, name=f"{namespace}-bad")
    assert done.returncode != 0, f"{kind} {spec} was accepted"
    assert field in done.stderr, done.stderr


@pytest.mark.parametrize(
    "path",
    [
        "x/.git",
        ".GIT",
        "git~1",
        "a/.git./b",
        "a/.git::$INDEX_ALLOCATION",
        ".g\u200cit/x",
        "apps/.gitmodules",
        "GITMOD~1",
        "x\\.git",
    ],
)
def test_paths_git_refuses_are_rejected_by_the_api_server(
    cp: ControlPlane, namespace: str, path: str
) -> None:
    done = _apply(cp, "GitTarget", TARGET | {"path": path}, namespace, name=f"{namespace}-git")
    assert done.returncode != 0, f"path {path!r} was accepted"
    assert "spec.path" in done.stderr, done.stderr
    assert "segment Git refuses" in done.stderr


@pytest.mark.parametrize(
    ("placement", "field"),
    [
        ({"default": "{namespace}/.git/{name}.yaml"}, "spec.placement.default"),
        (
            {"types": [{"resource": "pods", "template": "git~1/{name}.yaml"}]},
            "spec.placement.types[0].template",
        ),
    ],
)
def test_templates_with_a_segment_git_refuses_are_rejected_by_the_api_server(
    cp: ControlPlane, namespace: str, placement: dict[str, Any], field: str
) -> None:
    spec = TARGET | {"placement": placement}
    done = _apply(cp, "GitTarget", spec, namespace, name=f"{namespace}-tpl")
    assert done.returncode != 0, f"placement {placement} was accepted"
    assert field in done.stderr, done.stderr
    assert "segment Git refuses" in done.stderr


def test_names_that_only_look_like_git_are_accepted(cp: ControlPlane, namespace: str) -> None:
    spec = TARGET | {"path": ".github/x.git/.gitkeep/git~2", "placement": {"default": ".git.yaml"}}
    done = _apply(cp, "GitTarget", spec, namespace, name=f"{namespace}-ok")
    assert done.returncode == 0, done.stderr


def test_a_providers_url_cannot_change(cp: ControlPlane, namespace: str) -> None:
    created = _apply(cp, "GitProvider", PROVIDER, namespace)
    assert created.returncode == 0, created.stderr

    done = _apply(
        cp, "GitProvider", PROVIDER | {"url": "https://git.example/org/other.git"}, namespace
    )

    assert done.returncode != 0, "GitProvider.spec.url changed"
    assert "spec.url" in done.stderr
    assert "is immutable" in done.stderr
    assert _get(cp, "GitProvider", "x", namespace)["spec"]["url"] == PROVIDER["url"]


@pytest.mark.parametrize(
    "change", [{"branch": "other"}, {"path": "b"}, {"branch": "other", "path": "c/d"}]
)
def test_a_targets_branch_and_path_can_change(
    cp: ControlPlane, namespace: str, change: dict[str, str]
) -> None:
    spec = TARGET | {"path": "a"}
    created = _apply(cp, "GitTarget", spec, namespace)
    assert created.returncode == 0, created.stderr

    done = _apply(cp, "GitTarget", spec | change, namespace)

    assert done.returncode == 0, done.stderr
    held = _get(cp, "GitTarget", "x", namespace)["spec"]
    assert {k: held[k] for k in change} == change


@pytest.mark.parametrize(
    "change",
    [{"message": "other"}, {"targetRef": {"name": "u"}}, {"collectDelay": "1s"}],
    ids=["message", "target", "collect-delay"],
)
def test_commit_request_spec_is_immutable(
    cp: ControlPlane, namespace: str, change: dict[str, Any]
) -> None:
    spec = {"targetRef": {"name": "t"}, "message": "m"}
    created = _apply(cp, "CommitRequest", spec, namespace)
    assert created.returncode == 0, created.stderr

    done = _apply(cp, "CommitRequest", spec | change, namespace)

    assert done.returncode != 0
    assert "spec is immutable" in done.stderr
    assert _get(cp, "CommitRequest", "x", namespace)["spec"] == spec
