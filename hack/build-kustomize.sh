#!/usr/bin/env bash
# Builds kustomize (sigs.k8s.io/kustomize/kustomize/v5) from the committed tool module
# (hack/kustomize/go.mod, go.sum) into a per-machine cache keyed by version and prints the
# directory. Idempotent: when the binary exists and runs, it does nothing.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's#^require sigs.k8s.io/kustomize/kustomize/v5 \(v[0-9.]*\)$#\1#p' "$here/kustomize/go.mod")"
[ -n "$version" ] || { echo "no kustomize version in hack/kustomize/go.mod" >&2; exit 1; }
cache_root="${KUBESCRIBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubescribe}"
out="$cache_root/kustomize/$version"

if [ -x "$out/kustomize" ] && "$out/kustomize" version >/dev/null 2>&1; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build kustomize" >&2; exit 1; }
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/kustomize/go.mod" "$here/kustomize/go.sum" "$here/kustomize/tools.go" "$work/"
(cd "$work" && go mod download)
(cd "$work" && go build -ldflags "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=${version}" \
  -o "$out/.kustomize.tmp" sigs.k8s.io/kustomize/kustomize/v5)
mv "$out/.kustomize.tmp" "$out/kustomize"
echo "$out"
