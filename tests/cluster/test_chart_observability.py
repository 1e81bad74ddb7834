"""The chart's Grafana dashboard ConfigMap and PrometheusRule, as `helm template` renders them
(needs the cached helm): off by default, the files of the chart as they are when on, the
runbook base and the pending threshold taken from the values."""

from __future__ import annotations

import json

import pytest
import yaml

from kubescribe_devenv.cluster import ClusterTools
from kubescribe_devenv.manifests import CHART
from tests.cluster.test_chart import render
from tests.cluster.test_chart_values import objects, one

pytestmark = pytest.mark.cluster
RULES = CHART / "files" / "prometheus-rules.yaml"
DASHBOARD = CHART / "files" / "grafana-dashboard.json"


def test_the_dashboard_and_the_alerts_are_off_by_default(tools: ClusterTools) -> None:
    kinds = {d["kind"] for d in objects(tools)}
    assert "PrometheusRule" not in kinds
    assert not [
        d
        for d in objects(tools)
        if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"].get("labels", {})
    ]


def test_the_dashboard_is_a_configmap_the_grafana_sidecar_loads(tools: ClusterTools) -> None:
    docs = objects(
        tools,
        "--set=metrics.dashboard.enabled=true",
        "--set=metrics.dashboard.namespace=monitoring",
        "--set=metrics.dashboard.annotations.grafana_folder=GitOps",
    )
    config = one(docs, "ConfigMap", "k-kubescribe-dashboard")
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config["metadata"]["namespace"] == "monitoring"
    assert config["metadata"]["annotations"] == {"grafana_folder": "GitOps"}
    assert json.loads(config["data"]["kubescribe.json"]) == json.loads(DASHBOARD.read_text())


def test_the_alerts_take_the_runbook_base_and_pending_minutes_from_the_values(
    tools: ClusterTools,
) -> None:
    base = "https://git.example.invalid/ops/kubescribe/-/blob/main/README.md"
    docs = objects(
        tools,
        "--set=metrics.prometheusRule.enabled=true",
        f"--set=metrics.prometheusRule.runbookBaseURL={base}",
        "--set=metrics.prometheusRule.pendingMinutes=40",
        "--set=metrics.prometheusRule.labels.release=prometheus",
    )
    rule = one(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    rendered = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    source = {
        r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
    }
    assert rendered.keys() == source.keys()
    for name, alert in rendered.items():
        anchor = source[name]["annotations"]["runbook_url"].removeprefix("README.md")
        assert alert["annotations"]["runbook_url"] == base + anchor
        expected = source[name]["expr"].replace("15 * 60", "40 * 60")
        assert alert["expr"] == expected
    assert "> 40 * 60" in rendered["KubescribeChangesPending"]["expr"]


@pytest.mark.parametrize(
    "value",
    [
        "--set=metrics.prometheusRule.pendingMinutes=0",
        "--set=metrics.prometheusRule.runbookBaseURL=",
        "--set=metrics.dashboard.enabled=yes",
    ],
)
def test_bad_values_are_refused_by_the_schema(tools: ClusterTools, value: str) -> None:
    done = render(tools, "--set=metrics.prometheusRule.enabled=true", value)
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr
