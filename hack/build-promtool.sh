#!/usr/bin/env bash
# Builds promtool (github.com/prometheus/prometheus/cmd/promtool) from the committed tool module
# (hack/promtool/go.mod, go.sum) into a per-machine cache keyed by version and prints the
# directory: the alert rules' unit tests run `promtool check rules` and `promtool test rules`.
# Idempotent: when the binary exists and runs, it does nothing.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's#^require github.com/prometheus/prometheus \(v[0-9.]*\)$#\1#p' "$here/promtool/go.mod")"
[ -n "$version" ] || { echo "no prometheus version in hack/promtool/go.mod" >&2; exit 1; }
cache_root="${KUBESCRIBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubescribe}"
out="$cache_root/tools/promtool-$version"

if [ -x "$out/promtool" ] && "$out/promtool" --version >/dev/null 2>&1; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build promtool" >&2; exit 1; }
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/promtool/go.mod" "$here/promtool/go.sum" "$here/promtool/tools.go" "$work/"
# No `go mod download`: the build fetches only the modules whose packages promtool imports (the
# module graph lists many more, e.g. every cloud's service discovery SDK).
(cd "$work" && go build -tags remove_all_sd -ldflags "-s -w -X github.com/prometheus/common/version.Version=${version}" \
  -o "$out/.promtool.tmp" github.com/prometheus/prometheus/cmd/promtool)
mv "$out/.promtool.tmp" "$out/promtool"
echo "$out"
