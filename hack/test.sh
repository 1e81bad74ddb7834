#!/usr/bin/env bash
# The whole test suite: install what is missing, run every static check (hack/lint.sh, which runs
# the static part of hack/check.sh), then every test with line and branch coverage of src/ (a whole
# run fails below the floor in .ci/coverage-floor).
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
bash hack/lint.sh

status=0
uv run --frozen coverage erase
uv run --frozen pytest -n "${PYTEST_WORKERS:-2}" --dist loadgroup --cov --cov-report= "$@" || status=$?
# pytest exits 5 when a selection ran no test: that is not a failure of the suite.
[ "$status" -eq 5 ] && status=0
if [ "$status" -eq 0 ] && [ "$#" -eq 0 ]; then
  uv run --frozen coverage report --format=total > .coverage-total
  total=$(cat .coverage-total)
  floor=$(cat .ci/coverage-floor)
  echo "coverage: ${total}% of src/ (lines and branches; floor ${floor}%)" >&2
  if ! uv run --frozen python -c "import sys; sys.exit(float('$total') < float('$floor'))"; then
    echo "coverage: ${total}% is below the floor ${floor}% (.ci/coverage-floor)" >&2
    status=1
  fi
fi
exit "$status"
