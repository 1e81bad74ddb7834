"""The chart's generated parts are current: its CRD template (the code's CRDs, `kubescribe
crds`), its README (every value, described) and its Artifact Hub annotations."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubescribe.api.crds import crd_manifests
from kubescribe.api.objects import KINDS
from kubescribe_devenv import chartdoc
from kubescribe_devenv.manifests import CHART_CRDS, render_crd_template

STALE = "run: uv run python -m kubescribe_devenv.manifests"


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


def test_chart_readme_and_artifacthub_annotations_are_current() -> None:
    assert chartdoc.README.read_text() == chartdoc.render_readme(), STALE
    assert chartdoc.CHART_YAML.read_text() == chartdoc.render_chart_yaml(), STALE


def test_every_value_is_in_the_readme_with_a_description() -> None:
    assert chartdoc.undescribed() == []
    readme = chartdoc.README.read_text()
    found = chartdoc.values()
    assert {"crds.keep", "bootstrap.sshKey", "networkPolicy.git.ports"} <= {v.path for v in found}
    for value in found:
        assert f"| `{value.path}` |" in readme, value.path


def test_a_value_without_a_comment_or_a_schema_description_stops_the_generator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(chartdoc.VALUES.read_text() + "undocumentedThing: 1\n")
    monkeypatch.setattr(chartdoc, "VALUES", values)
    assert chartdoc.undescribed() == ["undocumentedThing"]
    with pytest.raises(ValueError, match="undocumentedThing"):
        chartdoc.render_readme()


def test_a_comment_describes_the_key_right_below_it_without_its_examples() -> None:
    text = """\
# The file's header, apart.

# Group comment.
group:
  # First line,
  # second line.
  #   kubectl create secret generic x \\
  #     --from-literal=a=b
  leaf: 1
  other: []
  #  - apiGroups: [""]
  # After the example.
  third: x
top: 2
"""
    assert chartdoc.comments(text) == {
        "group": "Group comment.",
        "group.leaf": "First line, second line.",
        "group.third": "After the example.",
    }


def test_the_artifacthub_crds_and_their_examples_are_the_apis() -> None:
    chart = yaml.safe_load(chartdoc.CHART_YAML.read_text())
    crds = yaml.safe_load(chart["annotations"]["artifacthub.io/crds"])
    assert [c["kind"] for c in crds] == [k.__name__ for k in KINDS]
    examples = yaml.safe_load(chart["annotations"]["artifacthub.io/crdsExamples"])
    assert [e["kind"] for e in examples] == [k.__name__ for k in KINDS]
    for kind, example in zip(KINDS, examples, strict=True):
        kind.model_validate(example)  # each example is a valid object of its kind
    for key in ("artifacthub.io/license", "artifacthub.io/prerelease", "artifacthub.io/changes"):
        assert chart["annotations"][key]
    for change in yaml.safe_load(chart["annotations"]["artifacthub.io/changes"]):
        assert change["kind"] in {"added", "changed", "deprecated", "removed", "fixed", "security"}
