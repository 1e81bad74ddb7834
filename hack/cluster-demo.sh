#!/usr/bin/env bash
# kubescribe as a Pod: a local single-node cluster (root), the image from the Dockerfile, the Helm
# chart with the audit receiver wired, an SSH Git server the Pod pushes to. `--keep` stays up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
exec uv run --frozen python -m kubescribe_devenv.clusterdemo "$@"
