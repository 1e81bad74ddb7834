"""The chart as pipelines consume it: a subchart, name overrides, extra volumes and env, the
Deployment strategy, topology spread, the NetworkPolicy, the aggregated ClusterRoles and the
supported Kubernetes range, proven by what `helm template` renders (needs the cached helm)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe_devenv.cluster import ClusterTools
from kubescribe_devenv.controlplane import KUBE_VERSION, REPO_ROOT
from kubescribe_devenv.manifests import CHART
from tests.cluster.test_chart import render

pytestmark = pytest.mark.cluster
INSTALL_DOC = REPO_ROOT / "docs" / "install.md"
WEBHOOKS = ("--set=audit.enabled=true", "--set=admission.enabled=true")
API_SERVER_PEER = "--set=networkPolicy.ingressFrom[0].ipBlock.cidr=10.0.0.0/24"
REDIS = ("--set=redis.url=rediss://redis.example:6380/0", "--set=redis.existingSecret=r")


def objects(tools: ClusterTools, *values: str, chart: Path = CHART) -> list[dict[str, Any]]:
    done = render(tools, *values, chart=chart)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return found


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def test_the_chart_installs_as_a_subchart_with_globals(tools: ClusterTools, tmp_path: Path) -> None:
    parent = tmp_path / "platform"
    shutil.copytree(CHART, parent / "charts" / "kubescribe")
    (parent / "Chart.yaml").write_text(
        "apiVersion: v2\nname: platform\nversion: 1.0.0\n"
        "dependencies:\n  - name: kubescribe\n    version: 0.1.0\n"
    )
    (parent / "values.yaml").write_text(
        "global:\n  imageRegistry: registry.example\n  labels: {team: platform}\n"
        "kubescribe:\n  fullnameOverride: audit-mirror\n"
    )
    docs = objects(tools, chart=parent)
    assert one(docs, "Deployment")["metadata"]["name"] == "audit-mirror"
    lint = subprocess.run(
        [str(tools.helm), "lint", "--strict", str(parent)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


EVERYTHING = (
    *WEBHOOKS,
    *REDIS,
    API_SERVER_PEER,
    "--set=networkPolicy.enabled=true",
    "--set=podDisruptionBudget.enabled=true",
    "--set=metrics.serviceMonitor.enabled=true",
    "--set=rbac.secretNamespaces={team-a}",
    "--set=tenantServiceAccount=kubescribe-reader",
)


@pytest.mark.parametrize("source", ["operator", "chart", "cert-manager"])
def test_every_name_the_chart_makes_follows_the_overrides(tools: ClusterTools, source: str) -> None:
    everything = (*EVERYTHING, f"--set=certificates.source={source}")
    full = render(tools, *everything, "--set=fullnameOverride=acme-mirror")
    assert full.returncode == 0, full.stderr
    assert "k-kubescribe" not in full.stdout  # the default name, "<release>-<chart>"
    for doc in (d for d in yaml.safe_load_all(full.stdout) if d):
        if doc["kind"] != "CustomResourceDefinition":  # named by the API: <plural>.<group>
            assert doc["metadata"]["name"].startswith("acme-mirror"), doc["metadata"]

    docs = objects(tools, *everything, "--set=nameOverride=scribe")
    for doc in docs:
        if doc["kind"] == "CustomResourceDefinition":
            assert doc["metadata"]["name"].endswith(".kubescribe.io"), doc["metadata"]
            continue
        assert doc["metadata"]["name"].startswith("k-scribe"), doc["metadata"]
        assert doc["metadata"].get("labels", {}).get("app.kubernetes.io/name", "scribe") == "scribe"
    selector = {"app.kubernetes.io/name": "scribe", "app.kubernetes.io/instance": "k"}
    assert one(docs, "Deployment")["spec"]["selector"]["matchLabels"] == selector
    assert one(docs, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"] == selector
    assert one(docs, "Service", "k-scribe-webhooks")["spec"]["selector"] == selector


def test_extra_volumes_mounts_and_env_reach_the_pod_after_the_charts_own(
    tools: ClusterTools,
) -> None:
    pod = pod_spec(
        objects(
            tools,
            "--set=extraVolumes[0].name=corp-ca",
            "--set=extraVolumes[0].configMap.name=corp-ca-bundle",
            "--set=extraVolumeMounts[0].name=corp-ca",
            "--set=extraVolumeMounts[0].mountPath=/etc/ssl/corp",
            "--set=extraVolumeMounts[0].readOnly=true",
            "--set=extraEnv[0].name=SSL_CERT_DIR",
            "--set=extraEnv[0].value=/etc/ssl/corp",
        )
    )
    [container] = pod["containers"]
    assert pod["volumes"][0]["name"] == "tmp"
    assert pod["volumes"][-1] == {"name": "corp-ca", "configMap": {"name": "corp-ca-bundle"}}
    assert container["volumeMounts"][0]["name"] == "tmp"
    assert container["volumeMounts"][-1] == {
        "name": "corp-ca",
        "mountPath": "/etc/ssl/corp",
        "readOnly": True,
    }
    assert container["env"][0]["name"] == "HOME"
    assert container["env"][-1] == {"name": "SSL_CERT_DIR", "value": "/etc/ssl/corp"}


def test_the_strategy_defaults_to_surge_one_and_can_be_replaced(tools: ClusterTools) -> None:
    def strategy(*values: str) -> Any:
        return one(objects(tools, *values), "Deployment")["spec"]["strategy"]

    assert strategy() == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert strategy("--set=strategy.type=Recreate") == {"type": "Recreate"}
    assert strategy("--set=strategy.rollingUpdate.maxUnavailable=1") == {
        "rollingUpdate": {"maxUnavailable": 1}
    }
    both = render(tools, "--set=strategy.type=Recreate", "--set=strategy.rollingUpdate.maxSurge=1")
    assert both.returncode != 0  # the API server would refuse rollingUpdate with Recreate
    assert "strategy.rollingUpdate is only for type RollingUpdate" in both.stderr


def test_replicas_spread_over_nodes_by_default_and_the_spread_can_be_replaced(
    tools: ClusterTools,
) -> None:
    assert "topologySpreadConstraints" not in pod_spec(objects(tools))
    [spread] = pod_spec(objects(tools, "--set=replicas=3"))["topologySpreadConstraints"]
    assert spread == {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "kubescribe",
                "app.kubernetes.io/instance": "k",
            }
        },
        "matchLabelKeys": ["pod-template-hash"],
    }
    zones = pod_spec(
        objects(
            tools,
            "--set=replicas=3",
            "--set=topologySpreadConstraints[0].maxSkew=1",
            "--set=topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
            "--set=topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
        )
    )["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in zones] == ["topology.kubernetes.io/zone"]


def test_the_network_policy_is_opt_in(tools: ClusterTools) -> None:
    assert not [d for d in objects(tools, *WEBHOOKS) if d["kind"] == "NetworkPolicy"]


def test_the_network_policy_admits_the_webhook_and_metrics_ports_from_their_peers_only(
    tools: ClusterTools,
) -> None:
    docs = objects(
        tools,
        *WEBHOOKS,
        *REDIS,
        "--set=networkPolicy.enabled=true",
        API_SERVER_PEER,
        "--set=networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring",
        "--set=networkPolicy.apiServer.cidrs={192.0.2.10/32}",
        "--set=networkPolicy.git.ports={22,443,8443}",
        "--set=networkPolicy.dnsTo[0].namespaceSelector.matchLabels.dns=yes",
    )
    policy = one(docs, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "k"
    webhooks, metrics = policy["ingress"]
    assert webhooks["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert webhooks["ports"] == [
        {"port": 9443, "protocol": "TCP"},
        {"port": 9444, "protocol": "TCP"},
    ]
    assert metrics == {
        "from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
        "ports": [{"port": 8080, "protocol": "TCP"}],
    }
    dns, api, git, redis = policy["egress"]
    assert dns == {
        "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
        "to": [{"namespaceSelector": {"matchLabels": {"dns": "yes"}}}],
    }
    assert api == {
        "ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}],
        "to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}],
    }
    assert git == {"ports": [{"port": p, "protocol": "TCP"} for p in (22, 443, 8443)]}
    assert redis == {"ports": [{"port": 6380, "protocol": "TCP"}]}


def test_the_network_policy_without_webhooks_admits_nothing_and_redis_defaults_to_6379(
    tools: ClusterTools,
) -> None:
    bare = one(objects(tools, "--set=networkPolicy.enabled=true"), "NetworkPolicy")["spec"]
    assert bare["ingress"] == []
    assert len(bare["egress"]) == 3  # DNS, API server, Git: no Redis without redis.url
    redis = one(
        objects(
            tools,
            "--set=networkPolicy.enabled=true",
            "--set=redis.url=redis://redis.example/0",
            "--set=redis.existingSecret=r",
            "--set=networkPolicy.redisTo[0].podSelector.matchLabels.app=redis",
        ),
        "NetworkPolicy",
    )["spec"]["egress"][-1]
    assert redis == {
        "ports": [{"port": 6379, "protocol": "TCP"}],
        "to": [{"podSelector": {"matchLabels": {"app": "redis"}}}],
    }


def test_webhooks_behind_a_network_policy_need_the_api_servers_peers(tools: ClusterTools) -> None:
    refused = render(tools, "--set=audit.enabled=true", "--set=networkPolicy.enabled=true")
    assert refused.returncode != 0
    assert "networkPolicy.ingressFrom" in refused.stderr


@pytest.mark.parametrize(
    "values",
    [
        ["--set=networkPolicy.enabled=true"],
        ["--set=networkPolicy.enabled=true", *WEBHOOKS, API_SERVER_PEER, *REDIS],
        [
            "--set=networkPolicy.enabled=true",
            "--set=networkPolicy.extraEgress[0].ports[0].port=3128",
            "--set=networkPolicy.git.cidrs={203.0.113.0/24}",
        ],
    ],
)
def test_network_policy_values_lint(tools: ClusterTools, values: list[str]) -> None:
    done = subprocess.run(
        [
            str(tools.helm),
            "lint",
            "--strict",
            str(CHART),
            f"--kube-version={KUBE_VERSION}",
            *values,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_tenants_with_edit_or_view_get_kubescribes_namespaced_kinds(tools: ClusterTools) -> None:
    docs = objects(tools)
    kinds = ["gitproviders", "gittargets", "watchrules", "commitrequests", "alerts"]
    edit = one(docs, "ClusterRole", "k-kubescribe-edit")
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    [rule] = edit["rules"]
    assert rule["apiGroups"] == ["kubescribe.io"]
    assert sorted(rule["resources"]) == sorted(kinds)  # no */status: the operator's alone
    assert {"create", "update", "patch", "delete", "get", "list", "watch"} <= set(rule["verbs"])
    view = one(docs, "ClusterRole", "k-kubescribe-view")
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert "rbac.authorization.k8s.io/aggregate-to-edit" not in view["metadata"]["labels"]
    assert view["rules"] == [
        {"apiGroups": ["kubescribe.io"], "resources": kinds, "verbs": ["get", "list", "watch"]}
    ]
    assert not any(
        "aggregate" in name
        for d in objects(tools, "--set=rbac.aggregate=false")
        for name in d["metadata"].get("labels", {})
    )


def test_the_supported_kubernetes_range_is_enforced_and_documented(tools: ClusterTools) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.29.0-0"
    assert f"`{chart['kubeVersion']}`" in INSTALL_DOC.read_text()
    for version in (KUBE_VERSION, "1.29.0", "v1.30.4-eks-a737599"):
        done = render(tools, f"--kube-version={version}")
        assert done.returncode == 0, (version, done.stderr)
    too_old = render(tools, "--kube-version=1.28.9")
    assert too_old.returncode != 0
    assert "kubeVersion" in too_old.stderr


# Each value this chart gained for pipelines, set once from the command line.
NEW_VALUES = [
    ["--set=global.imageRegistry=registry.example"],
    ["--set=nameOverride=scribe"],
    ["--set=fullnameOverride=scribe"],
    ["--set=extraEnv[0].name=A", "--set=extraEnv[0].value=b"],
    ["--set=extraVolumes[0].name=v", "--set=extraVolumes[0].emptyDir.medium=Memory"],
    ["--set=extraVolumeMounts[0].name=tmp", "--set=extraVolumeMounts[0].mountPath=/x"],
    ["--set=strategy.type=Recreate"],
    ["--set=strategy.rollingUpdate.maxSurge=25%"],
    [
        "--set=topologySpreadConstraints[0].maxSkew=2",
        "--set=topologySpreadConstraints[0].topologyKey=zone",
        "--set=topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
    ],
    ["--set=rbac.aggregate=false"],
    ["--set=networkPolicy.enabled=true"],
    ["--set=networkPolicy.enabled=true", *WEBHOOKS, API_SERVER_PEER],
    ["--set=networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus"],
    ["--set=networkPolicy.dnsTo[0].ipBlock.cidr=169.254.20.10/32"],
    [
        "--set=networkPolicy.apiServer.cidrs={10.0.0.1/32}",
        "--set=networkPolicy.apiServer.ports={443}",
    ],
    ["--set=networkPolicy.git.cidrs={2001:db8::/32}", "--set=networkPolicy.git.ports={22}"],
    ["--set=networkPolicy.redisTo[0].namespaceSelector.matchLabels.redis=yes"],
    ["--set=networkPolicy.extraEgress[0].ports[0].port=3128"],
    ["--set=crds.enabled=false"],
    ["--set=crds.keep=false"],
    [
        "--set=bootstrap.enabled=true",
        "--set=bootstrap.namespace=team-a",
        "--set=bootstrap.url=ssh://git@git.example/r.git",
        "--set=bootstrap.sshKey=k",
        "--set=bootstrap.knownHosts=h",
        "--set=bootstrap.provider.push.commitWindow=1s",
        "--set=bootstrap.target.suspend=true",
        "--set=bootstrap.branch=audit",
        "--set=bootstrap.path=team-a",
        "--set=bootstrap.rules[0].resources[0]=services",
    ],
    [
        "--set=bootstrap.enabled=true",
        "--set=bootstrap.url=git@h:r",
        "--set=bootstrap.existingSecret=s",
    ],
]

# The same values mistyped: the schema names the path it refused.
MISTYPED = [
    (["--set=global=on"], "/global"),
    (["--set=nameOverride=Scribe_1"], "/nameOverride"),
    (["--set=fullnameOverride=x.y"], "/fullnameOverride"),
    (["--set=extraEnv[0].value=b"], "/extraEnv/0"),
    (["--set=extraVolumes[0].name=tmp"], "/extraVolumes/0/name"),
    (["--set=extraVolumeMounts[0].name=v"], "/extraVolumeMounts/0"),
    (["--set=strategy.type=Rolling"], "/strategy/type"),
    (["--set=strategy.maxSurge=1"], "/strategy"),
    (["--set=topologySpreadConstraints[0].maxSkew=1"], "/topologySpreadConstraints/0"),
    (["--set=rbac.aggregate=yes-please"], "/rbac/aggregate"),
    (["--set=networkPolicy.enabled=maybe"], "/networkPolicy/enabled"),
    (["--set=networkPolicy.ingressFrom[0].cidr=10.0.0.0/8"], "/networkPolicy/ingressFrom/0"),
    (["--set=networkPolicy.metricsFrom={prometheus}"], "/networkPolicy/metricsFrom/0"),
    (["--set=networkPolicy.apiServer.cidrs={10.0.0.1}"], "/networkPolicy/apiServer/cidrs/0"),
    (["--set=networkPolicy.git.ports={ssh}"], "/networkPolicy/git/ports/0"),
    (["--set=networkPolicy.git.port=22"], "/networkPolicy/git"),
    (["--set=networkPolicy.redisTo[0].ipBlock.except={x}"], "/networkPolicy/redisTo/0"),
    (["--set=networkPolicy.egress[0].ports[0].port=1"], "/networkPolicy"),
    (["--set=crds.enabled=yes"], "/crds/enabled"),
    (["--set=crds.install=true"], "/crds"),
    (["--set=bootstrap.enabled=on"], "/bootstrap/enabled"),
    (["--set=bootstrap.url=ftp://h/r"], "/bootstrap/url"),
    (["--set=bootstrap.rules[0].apiGroups[0]=apps"], "/bootstrap/rules/0"),
    (["--set=bootstrap.target.path=x"], "/bootstrap/target/path"),
    (["--set=bootstrap.sshkey=x"], "/bootstrap"),
]


@pytest.mark.parametrize("values", NEW_VALUES, ids=lambda v: v[0].removeprefix("--set="))
def test_each_new_value_renders_when_set(tools: ClusterTools, values: list[str]) -> None:
    done = render(tools, *values)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("values", "path"),
    MISTYPED,
    ids=lambda v: v[0].removeprefix("--set=") if isinstance(v, list) else "",
)
def test_a_mistyped_value_is_refused_by_the_schema(
    tools: ClusterTools, values: list[str], path: str
) -> None:
    done = render(tools, *values)
    assert done.returncode != 0
    assert "schema" in done.stderr, done.stderr
    assert f"'{path}'" in done.stderr or f"'{path}/" in done.stderr, done.stderr


def test_every_new_value_is_in_the_install_docs_and_the_schema() -> None:
    rows = re.findall(r"^\|([^|]+)\|", INSTALL_DOC.read_text(), re.MULTILINE)
    documented = {name for row in rows for name in re.findall(r"`([^`]+)`", row)}
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    for values in NEW_VALUES:
        for value in values:
            path = re.sub(r"\[\d+\]", "", value.removeprefix("--set=").split("=", 1)[0])
            names = [d for d in documented if path == d or path.startswith(d + ".")]
            assert names, f"{path} is not in the values tables of docs/install.md"
            node = schema
            for key in max(names, key=len).split("."):
                node = node["properties"][key]  # and in values.schema.json
