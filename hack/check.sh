#!/usr/bin/env bash
# The fast check for everyday work, in under a minute and without the control plane: ruff, ruff
# format, mypy (strict, on src/ and tests/), the import contracts, the module sizes, then the
# unit tests on two workers.
#
#   bash hack/check.sh               # all of it
#   bash hack/check.sh --no-tests    # the Python static checks only (hack/lint.sh runs these)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/steps.sh
source hack/steps.sh

step ruff uv run --frozen ruff check src tests bench
step format uv run --frozen ruff format --check src tests bench
step mypy uv run --frozen mypy
step imports uv run --frozen lint-imports
step sizes uv run --frozen python hack/module_sizes.py
if [ "${1:-}" != "--no-tests" ]; then
  step unit uv run --frozen pytest -q -n 2 tests/unit
fi
