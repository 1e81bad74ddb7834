#!/usr/bin/env bash
# The whole test suite: install what is missing, run the quality gates, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh

uv run --frozen ruff check src tests bench
uv run --frozen ruff format --check src tests bench
uv run --frozen mypy
uv run --frozen lint-imports
status=0
uv run --frozen pytest -n "${PYTEST_WORKERS:-2}" --dist loadgroup "$@" || status=$?
# pytest exits 5 when a selection ran no test: that is not a failure of the suite.
[ "$status" -eq 5 ] && status=0
exit "$status"
