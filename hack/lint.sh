#!/usr/bin/env bash
# Every static check, in about a minute and without the control plane: the Python checks of
# hack/check.sh (lint, format, strict types, import contracts, module sizes), then shell, the
# Dockerfile, YAML, the Helm chart (hack/lint-chart.sh; not with --no-chart), and the licences of
# the locked dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/steps.sh
source hack/steps.sh
export STEP_PREFIX=lint

bash hack/check.sh --no-tests
step shellcheck shellcheck -x hack/*.sh .ci/run
step hadolint uv run --frozen hadolint Dockerfile
step yamllint yamllint -s charts/kubescribe/Chart.yaml charts/kubescribe/values.yaml \
  charts/kubescribe/files tests/promtool .yamllint
if [ "${1:-}" != --no-chart ]; then
  bash hack/lint-chart.sh
fi
step licences uv run --frozen python hack/licenses.py >/dev/null
