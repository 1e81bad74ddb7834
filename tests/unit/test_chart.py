"""The chart's CRD template is the code's CRDs (`kubescribe crds`), generated, never edited."""

from __future__ import annotations

import yaml

from kubescribe.api.crds import crd_manifests
from kubescribe.devenv.manifests import CHART_CRDS, render_crd_template

STALE = "run: uv run python -m kubescribe.devenv.manifests"


def test_chart_crds_are_current() -> None:
    assert CHART_CRDS.read_text() == render_crd_template(), STALE


def test_the_crd_template_holds_the_apis_crds_unchanged_behind_crds_enabled() -> None:
    text = render_crd_template()
    lines = text.splitlines()
    assert lines[lines.index("*/}}") + 1] == "{{- if .Values.crds.enabled }}"
    assert lines[-1] == "{{- end }}"
    # Without the template lines (labels, the keep annotation), each document is the CRD.
    plain = "\n".join(
        line
        for line in lines
        if "{{" not in line
        and "*/}}" not in line
        and not line.startswith("  annotations:")
        and "helm.sh/resource-policy" not in line
        and not line.startswith("  labels:")
    )
    body = plain.split("*/}}", 1)[-1]
    docs = [d for d in yaml.safe_load_all(body[body.index("---") :]) if d]
    assert docs == crd_manifests()
    assert text.count("helm.sh/resource-policy: keep") == len(docs)


def test_template_delimiters_in_a_description_are_printed_literally() -> None:
    [crd] = [c for c in crd_manifests() if c["spec"]["names"]["kind"] == "WatchRule"]
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = "a {{ .x }} b"
    text = render_crd_template([crd])
    assert 'description: a {{ "{{" }} .x }} b' in text
