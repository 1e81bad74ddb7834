#!/usr/bin/env bash
# Builds kustomize (sigs.k8s.io/kustomize/kustomize/v5) from the committed tool module
# (hack/kustomize/go.mod, go.sum) into a per-machine cache keyed by version and prints the
# directory. Idempotent: when the binary exists and runs, it does nothing.
#
#   bash hack/build-kustomize.sh [--arch amd64|arm64]
#
# --arch: a static Linux binary for that architecture (CGO off), in a folder of its own
# (`<version>/linux-<arch>`); it is checked to be there, not run. Without it: the machine's.
set -euo pipefail
arch=""
case "${1:-}" in
  "") ;;
  --arch) arch="${2:-}" ;;
  --arch=*) arch="${1#--arch=}" ;;
  *) echo "usage: bash hack/build-kustomize.sh [--arch amd64|arm64]" >&2; exit 2 ;;
esac
case "$arch" in
  "" | amd64 | arm64) ;;
  *) echo "build-kustomize: unsupported architecture '$arch' (amd64 or arm64)" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's#^require sigs.k8s.io/kustomize/kustomize/v5 \(v[0-9.]*\)$#\1#p' "$here/kustomize/go.mod")"
[ -n "$version" ] || { echo "no kustomize version in hack/kustomize/go.mod" >&2; exit 1; }
cache_root="${KUBESCRIBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubescribe}"
out="$cache_root/kustomize/$version"

if [ -n "$arch" ]; then
  # The machine's own architecture: the usual build, checked by running it.
  if [ "$arch" = "$(go env GOARCH 2>/dev/null || dpkg --print-architecture)" ]; then
    exec bash "$0"
  fi
  out="$out/linux-$arch"
  if [ ! -s "$out/kustomize" ]; then
    command -v go >/dev/null || { echo "go is required to build kustomize" >&2; exit 1; }
    mkdir -p "$out"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    cp "$here/kustomize/go.mod" "$here/kustomize/go.sum" "$here/kustomize/tools.go" "$work/"
    (cd "$work" && go mod download)
    (cd "$work" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" go build \
      -ldflags "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=${version}" \
      -o "$out/.kustomize.tmp" sigs.k8s.io/kustomize/kustomize/v5)
    mv "$out/.kustomize.tmp" "$out/kustomize"
  fi
  echo "$out"
  exit 0
fi
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
