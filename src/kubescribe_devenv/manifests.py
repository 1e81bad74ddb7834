"""The chart's generated parts: its CRD template and the plain manifests in deploy/.

    uv run python -m kubescribe_devenv.manifests     # rewrite them after a change

`charts/kubescribe/templates/crds.yaml` is `kubescribe crds` as a template: behind
`crds.enabled`, with `helm.sh/resource-policy: keep` under `crds.keep`, so that `helm upgrade`
upgrades the CRDs and `helm uninstall` leaves them. `deploy/kubescribe.yaml` is `helm template`
of the chart with its default values (plus the Namespace), for `kubectl apply -f`;
deploy/prometheus/rules.yaml and deploy/grafana/kubescribe.json are copies of the chart's alert
rules and dashboard. Tests fail while any is stale.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from kubescribe.api.crds import crd_manifests
from kubescribe_devenv.controlplane import KUBE_VERSION, REPO_ROOT

CHART = REPO_ROOT / "charts" / "kubescribe"
CHART_CRDS = CHART / "templates" / "crds.yaml"
DEPLOY = REPO_ROOT / "deploy" / "kubescribe.yaml"
# The chart's alert rules and Grafana dashboard, copied as they are for users without Helm.
COPIES = {
    CHART / "files" / "prometheus-rules.yaml": REPO_ROOT / "deploy" / "prometheus" / "rules.yaml",
    CHART / "files" / "grafana-dashboard.json": REPO_ROOT
    / "deploy"
    / "grafana"
    / "kubescribe.json",
}
RELEASE = "kubescribe"
NAMESPACE = "kubescribe-system"

_HEADER = f"""\
# kubescribe: plain manifests for `kubectl apply --server-side -f deploy/kubescribe.yaml`.
# Generated from charts/kubescribe with its default values (`helm template {RELEASE}
# charts/kubescribe -n {NAMESPACE} --kube-version {KUBE_VERSION}`); do not edit: run
# `uv run python -m kubescribe_devenv.manifests`. Set the image to the one you built from the
# Dockerfile, and bind the Secrets role in the namespaces of your GitProviders (the chart's
# rbac.secretNamespaces); the chart has every other option.
apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
"""


_CRD_TEMPLATE_HEADER = """\
{{/*
The CRDs, generated from the API models (`kubescribe crds`): do not edit, run
`uv run python -m kubescribe_devenv.manifests`. Templates, not crds/, so that `helm upgrade`
upgrades them; crds.keep leaves them (and every object of their kinds) on `helm uninstall`.
*/}}
{{- if .Values.crds.enabled }}
"""
_CRD_METADATA = """\
  labels:
    {{- include "kubescribe.labels" . | nindent 4 }}
  {{- if .Values.crds.keep }}
  annotations:
    helm.sh/resource-policy: keep
  {{- end }}
"""


def render_crd_template(crds: Sequence[dict[str, Any]] | None = None) -> str:
    """templates/crds.yaml for `crds` (default: the API's CRDs, `kubescribe crds`)."""
    parts = [_CRD_TEMPLATE_HEADER]
    for crd in crd_manifests() if crds is None else crds:
        name = crd["metadata"]["name"]
        body = {**crd, "metadata": {"name": name}}
        text = yaml.dump(
            body, Dumper=yaml.SafeDumper, sort_keys=False, allow_unicode=True, width=1 << 20
        )
        # Template delimiters in a description would be read by Helm: print them literally.
        text = text.replace("{{", '{{ "{{" }}')
        head = f"metadata:\n  name: {name}\n"
        if head not in text:
            raise ValueError(f"{name}: unexpected metadata in {text[:200]!r}")
        parts.append("---\n" + text.replace(head, head + _CRD_METADATA, 1))
    parts.append("{{- end }}\n")
    return "".join(parts)


def render_deploy(helm: Path) -> str:
    """deploy/kubescribe.yaml as `helm` renders it now."""
    done = subprocess.run(
        [
            *(str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE),
            *("--kube-version", KUBE_VERSION),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return _HEADER + done.stdout


def main() -> None:
    from kubescribe_devenv import chartdoc  # noqa: PLC0415
    from kubescribe_devenv.cluster import cluster_tools  # noqa: PLC0415 - builds helm if missing

    CHART_CRDS.write_text(render_crd_template())
    chartdoc.main()  # the chart's README and Artifact Hub annotations
    DEPLOY.write_text(render_deploy(cluster_tools().helm))
    for source, copy in COPIES.items():
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(source.read_bytes())
    written = [CHART_CRDS, DEPLOY, *COPIES.values()]
    print(f"wrote {', '.join(str(p.relative_to(REPO_ROOT)) for p in written)}")


if __name__ == "__main__":
    main()
    sys.exit(0)
