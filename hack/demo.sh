#!/usr/bin/env bash
# The main job on the embedded default: a local control plane, a local Git remote, the operator.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh --demo
exec uv run --frozen python -m kubescribe_devenv.demo "$@"
