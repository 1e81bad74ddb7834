"""The Grafana dashboard and the alert rules query only metrics the operator exports, every
alert links a runbook that exists in the README, and deploy/ holds the chart's copies."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe import metrics
from kubescribe_devenv.manifests import COPIES
from tests.unit.test_doc_links import anchors

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "kubescribe" / "files" / "prometheus-rules.yaml"
DASHBOARD = ROOT / "charts" / "kubescribe" / "files" / "grafana-dashboard.json"

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or"}
KEYWORDS |= {"unless", "offset", "inf", "nan"}
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
AGGREGATIONS = {"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk"}
AGGREGATIONS |= {"quantile", "count_values", "group", "limitk", "limit_ratio"}


def exported() -> set[str]:
    """The sample names the operator's registry exposes (labelled families included before
    their first child exists)."""
    names = set()
    for family in metrics.REGISTRY.collect():
        names |= {sample.name for sample in family.samples}
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
        else:
            names.add(family.name)
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions or
    aggregations (followed by `(`), keywords, label names in `by (...)`-like lists, label
    matchers, strings, range and subquery durations, or Grafana variables."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\$\w+", " ", text)  # Grafana variables outside matchers
    text = re.sub(r"\blabel_values\(([^,)]*),[^)]*\)", r"(\1)", text)  # Grafana: (metric, label)
    text = re.sub(r"\b\d+(?:ms|s|m|h|d|w|y)\b", " ", text)  # durations (offset 5m)
    names = set()
    tokens = re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*|\d+(?:\.\d+)?(?:e[+-]?\d+)?|\S", text)
    skip_list = False
    for i, token in enumerate(tokens):
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        if skip_list:
            skip_list = token != ")"
            continue
        if token.lower() in LABEL_LISTS:
            skip_list = following == "("
            continue
        if not re.match(r"[A-Za-z_:]", token) or token.lower() in KEYWORDS:
            continue
        if following == "(" or (token in AGGREGATIONS and following in LABEL_LISTS):
            continue  # a function or an aggregation
        names.add(token)
    return names


def rule_exprs() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def dashboard_exprs() -> list[str]:
    def panels(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for item in items for p in [item, *panels(item.get("panels", []))]]

    board = json.loads(DASHBOARD.read_text())
    found = [t["expr"] for p in panels(board["panels"]) for t in p.get("targets", [])]
    found += [
        v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        for v in board["templating"]["list"]
        if v["type"] == "query"
    ]
    return found


def test_the_tokenizer_finds_metric_names_only() -> None:
    expr = (
        'sum by (target, reason) (rate(a_total{job=~"$job",x="y}"}[$__rate_interval]))'
        " / on (job) group_left () max without (le) (b_bucket offset 5m) > 0.9 * 1e3"
        " and time() - c unless label_values(d, job) or histogram_quantile(0.5, e[5m:1m])"
    )
    assert metric_names(expr) == {"a_total", "b_bucket", "c", "d", "e"}


@pytest.mark.parametrize("source", ["rules", "dashboard"], ids=["alert rules", "Grafana dashboard"])
def test_every_expression_names_only_exported_metrics(source: str) -> None:
    exprs = list(rule_exprs().values()) if source == "rules" else dashboard_exprs()
    assert len(exprs) >= 9
    known = exported()
    assert {"process_resident_memory_bytes", "kubescribe_build_info"} <= known
    unknown = {name for expr in exprs for name in metric_names(expr) if name not in known}
    assert unknown == set()
    assert all(metric_names(expr) for expr in exprs)


def test_every_alert_has_a_runbook_in_the_readme_and_a_promtool_test() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    readme = anchors(ROOT / "README.md")
    tested = (ROOT / "tests" / "promtool" / "alerts.test.yaml").read_text()
    for rule in (r for g in groups for r in g["rules"]):
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == "README.md", rule["alert"]
        assert anchor in readme, rule["alert"]
        assert f"alertname: {rule['alert']}\n" in tested, rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}


def test_deploy_holds_the_charts_rules_and_dashboard() -> None:
    for source, copy in COPIES.items():
        assert copy.read_bytes() == source.read_bytes(), (
            f"{copy.relative_to(ROOT)} is stale: run `uv run python -m kubescribe_devenv.manifests`"
        )


def test_every_metric_is_named_in_the_readme() -> None:
    text = (ROOT / "README.md").read_text().split("## Operating it", 1)[1].split("\n## ", 1)[0]
    missing = [
        family.name
        for family in metrics.REGISTRY.collect()
        if family.name.startswith("kubescribe_")
        and f"`{family.name}" not in text
        and f"`{family.name}_total" not in text
    ]
    assert missing == []
