"""The chart's generated parts: its copy of the CRDs and the plain manifests in deploy/.

    uv run python -m kubescribe.devenv.manifests     # rewrite both after a change

`charts/kubescribe/crds/kubescribe.yaml` is `kubescribe crds`; `deploy/kubescribe.yaml` is
`helm template` of the chart with its default values (plus the Namespace), for
`kubectl apply -f`; deploy/prometheus/rules.yaml and deploy/grafana/kubescribe.json are copies
of the chart's alert rules and dashboard. Tests fail while any is stale.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kubescribe.api.crds import render_crds
from kubescribe.devenv.controlplane import KUBE_VERSION, REPO_ROOT

CHART = REPO_ROOT / "charts" / "kubescribe"
CHART_CRDS = CHART / "crds" / "kubescribe.yaml"
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
# charts/kubescribe -n {NAMESPACE} --include-crds --kube-version {KUBE_VERSION}`); do not edit: run
# `uv run python -m kubescribe.devenv.manifests`. Set the image to the one you built from the
# Dockerfile, and bind the Secrets role in the namespaces of your GitProviders (the chart's
# rbac.secretNamespaces); the chart has every other option.
apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
"""


def render_deploy(helm: Path) -> str:
    """deploy/kubescribe.yaml as `helm` renders it now."""
    done = subprocess.run(
        [
            *(str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE),
            *("--include-crds", "--kube-version", KUBE_VERSION),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return _HEADER + done.stdout


def main() -> None:
    from kubescribe.devenv.cluster import cluster_tools  # noqa: PLC0415 - builds helm if missing

    CHART_CRDS.write_text(render_crds())
    DEPLOY.write_text(render_deploy(cluster_tools().helm))
    for source, copy in COPIES.items():
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(source.read_bytes())
    written = [CHART_CRDS, DEPLOY, *COPIES.values()]
    print(f"wrote {', '.join(str(p.relative_to(REPO_ROOT)) for p in written)}")


if __name__ == "__main__":
    main()
    sys.exit(0)
