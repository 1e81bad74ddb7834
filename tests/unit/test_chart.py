"""The chart's copy of the CRDs is the code's (`kubescribe crds`)."""

from __future__ import annotations

from kubescribe.api.crds import render_crds
from kubescribe.devenv.manifests import CHART_CRDS


def test_chart_crds_are_current() -> None:
    stale = "run: uv run python -m kubescribe.devenv.manifests"
    assert CHART_CRDS.read_text() == render_crds(), stale
