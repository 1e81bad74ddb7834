#!/usr/bin/env bash
# Builds one command of a Go module from the committed tool module hack/tools/NAME (go.mod,
# go.sum, tools.go) into a per-machine cache keyed by the module's version, and prints the
# directory that holds the binary. Idempotent: when the binary exists and runs, it does nothing.
#
#   bash hack/build-gotool.sh NAME MODULE PACKAGE [CHECK-ARGS...]
#
# NAME is the binary's name, MODULE the module whose `require` line in hack/tools/NAME/go.mod
# gives the version, PACKAGE the main package; CHECK-ARGS run the cached binary to prove it works.
# An optional hack/tools/NAME/prepare.sh runs in the scratch module after the download (which
# checks go.sum), before the build: for a module that does not build as published.
# The build uses the Go on PATH as it is (GOTOOLCHAIN is left alone: a module that needs a newer
# Go fails here instead of downloading a toolchain).
set -euo pipefail

[ "$#" -ge 3 ] || { echo "usage: hack/build-gotool.sh NAME MODULE PACKAGE [CHECK-ARGS...]" >&2; exit 2; }
name="$1" module="$2" package="$3"
shift 3
here="$(cd "$(dirname "$0")" && pwd)"
mod_dir="$here/tools/$name"
{ [ -f "$mod_dir/go.mod" ] && [ -f "$mod_dir/go.sum" ]; } || { echo "no tool module in hack/tools/$name" >&2; exit 1; }
version="$(sed -n "s#^require ${module//./\\.} \(v[0-9][0-9A-Za-z.+-]*\)\$#\1#p" "$mod_dir/go.mod")"
[ -n "$version" ] || { echo "no 'require $module vX.Y.Z' line in hack/tools/$name/go.mod" >&2; exit 1; }
cache_root="${KUBESCRIBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubescribe}"
out="$cache_root/tools/$name-$version"

if [ -x "$out/$name" ] && "$out/$name" "$@" >/dev/null 2>&1; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { echo "go is required to build $name" >&2; exit 1; }
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$mod_dir/go.mod" "$mod_dir/go.sum" "$mod_dir/tools.go" "$work/"
(cd "$work" && go mod download)
[ ! -f "$mod_dir/prepare.sh" ] || (cd "$work" && bash "$mod_dir/prepare.sh")
# -trimpath: no build machine paths in the binary. The version variables are the ones each
# upstream release sets (an unknown -X name is ignored by the linker).
ldflags="-s -w -X ${module}/version.version=${version} -X sigs.k8s.io/release-utils/version.gitVersion=${version}"
(cd "$work" && go build -trimpath -ldflags "$ldflags" -o "$out/.$name.tmp" "$package")
mv "$out/.$name.tmp" "$out/$name"
"$out/$name" "$@" >/dev/null 2>&1 || { echo "built $name does not run: $out/$name $*" >&2; exit 1; }
echo "$out"
