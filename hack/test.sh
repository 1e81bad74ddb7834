#!/usr/bin/env bash
# The whole test suite: install what is missing, run every static check (hack/lint.sh, which runs
# the static part of hack/check.sh), then every test with line and branch coverage of src/ (a whole
# run fails below the floor in .ci/coverage-floor).
#
# A whole run (no arguments, as root) builds what only tests/cluster uses (hack/setup-cluster.sh:
# about 10 minutes on a fresh machine) at idle priority beside the checks and the other tests,
# then lints the chart and runs tests/cluster. With arguments, everything is built first and
# pytest gets the arguments.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
# pytest exits 5 when a selection ran no test: that is not a failure of the suite.
pytest() {
  local rc=0
  uv run --frozen pytest -n "${PYTEST_WORKERS:-2}" --dist loadgroup --durations=15 --cov --cov-report= "$@" || rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || status=$rc
}
if [ "$#" -gt 0 ]; then
  bash hack/setup.sh
  bash hack/lint.sh
  uv run --frozen coverage erase
  pytest "$@"
  exit "$status"
fi

bash hack/setup.sh --no-cluster
uv run --frozen coverage erase
cluster_log=""
if [ "$(id -u)" -eq 0 ]; then
  cluster_log="$(mktemp)"
  # Its own process group (setsid), so that an early exit stops its builds too.
  setsid nice -n 19 ionice -c 3 bash hack/setup-cluster.sh >"$cluster_log" 2>&1 &
  cluster_pid=$!
  trap 'kill -- "-$cluster_pid" 2>/dev/null || true; rm -f "$cluster_log"' EXIT
fi
bash hack/lint.sh --no-chart
pytest --ignore=tests/cluster
if [ -n "$cluster_log" ]; then
  start=$(date +%s)
  cluster_status=0
  wait "$cluster_pid" || cluster_status=$?
  cat "$cluster_log" >&2
  echo "setup: waited $(( $(date +%s) - start ))s for the cluster set-up after the other tests" >&2
  if [ "$cluster_status" -ne 0 ]; then
    echo "setup: the cluster set-up failed beside the tests (above); once more in the foreground" >&2
    bash hack/setup-cluster.sh
  fi
fi
bash hack/lint-chart.sh
pytest --cov-append tests/cluster

uv run --frozen coverage report --format=total > .coverage-total
total=$(cat .coverage-total)
floor=$(cat .ci/coverage-floor)
echo "coverage: ${total}% of src/ (lines and branches; floor ${floor}%)" >&2
if ! uv run --frozen python -c "import sys; sys.exit(float('$total') < float('$floor'))"; then
  echo "coverage: ${total}% is below the floor ${floor}% (.ci/coverage-floor)" >&2
  status=1
fi
exit "$status"
