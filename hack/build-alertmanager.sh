#!/usr/bin/env bash
# Builds Alertmanager (github.com/prometheus/alertmanager, cmd/alertmanager; version in
# hack/tools/alertmanager/go.mod) into ${KUBESCRIBE_CACHE:-~/.cache/kubescribe}/tools/alertmanager-<version>/
# and prints that directory: the Alert receiver tests post to it. Idempotent.
set -euo pipefail
exec bash "$(dirname "$0")/build-gotool.sh" alertmanager github.com/prometheus/alertmanager \
  github.com/prometheus/alertmanager/cmd/alertmanager --version
