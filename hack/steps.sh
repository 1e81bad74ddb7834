# shellcheck shell=bash
# The timed step runner the check scripts share: `step NAME COMMAND...` runs the command and
# prints how long it took (the scripts run under `set -e`, so a failing step stops them).
step() {
  local name=$1
  shift
  local t0
  t0=$(date +%s%N)
  "$@"
  echo "${STEP_PREFIX:-check}: $name ok in $(( ($(date +%s%N) - t0) / 1000000 )) ms" >&2
}
