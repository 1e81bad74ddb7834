#!/usr/bin/env bash
# Builds, as root, what only tests/cluster uses: the single-node test cluster and the operator
# image, then the release tools (the distribution registry and cosign, from their Go modules) for
# hack/release.sh and tests/cluster/test_release.py. Idempotent, like every build step; prints how
# long each took.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(id -u)" -eq 0 ] || { echo "setup-cluster: the test cluster needs root" >&2; exit 1; }
start=$(date +%s)
cluster_dir=$(bash hack/build-cluster.sh)
image=$(bash hack/build-image.sh)
echo "setup: test cluster ready in $(( $(date +%s) - start ))s: $(basename "$cluster_dir"), ${image#* }" >&2
for tool in registry cosign; do
  start=$(date +%s)
  tool_dir=$(bash "hack/build-$tool.sh")
  echo "setup: $tool ready in $(( $(date +%s) - start ))s: $(basename "$tool_dir")" >&2
done
