#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd from their Go modules into a per-machine cache keyed
# by version. Idempotent: when the binaries exist and run, it does nothing.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
here="$(cd "$(dirname "$0")" && pwd)"
cache_root="${KUBESCRIBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubescribe}"
out="$cache_root/controlplane/${KUBE_VERSION}-etcd${ETCD_VERSION}"

ok() { [ -x "$out/$1" ] && "$out/$1" "${@:2}" >/dev/null 2>&1; }
if ok kube-apiserver --version && ok kubectl version --client && ok etcd --version; then
  echo "$out"
  exit 0
fi
mkdir -p "$out"
command -v go >/dev/null || { echo "go is required to build the control plane" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
staging="v0.${KUBE_VERSION#v1.}"

# Kubernetes points its staging modules at ./staging/src/k8s.io/<m>, which dependents ignore:
# generate one replace line per staging module from kubernetes' own go.mod (run when bumping).
generate_kube_gomod() {
  local mod="$1" kmod
  go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" >/dev/null
  kmod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/${KUBE_VERSION}.mod"
  {
    echo "module kubescribe.io/controlplane/kube"
    echo
    echo "go 1.26.0"
    echo
    echo "godebug default=go1.26"
    echo
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*#\t\1 => \1 '"$staging"'#p' "$kmod"
    echo ")"
  } >"$mod/go.mod"
  (cd "$mod" && go mod tidy >/dev/null)
  cp "$mod/go.mod" "$mod/go.sum" "$here/controlplane/kube/"
}

build_kube() {
  local mod="$work/kube"
  cp -r "$here/controlplane/kube" "$mod"
  if ! grep -qE "^[[:space:]]*(require )?k8s.io/kubernetes ${KUBE_VERSION}( |$)" "$mod/go.mod"; then
    generate_kube_gomod "$mod"
  fi
  # No `go mod download`: the build fetches only the modules its packages import. One build for
  # both commands compiles their shared packages once and links the two binaries in parallel.
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
  ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION}"
  mkdir -p "$work/bin"
  (cd "$mod" && go build -ldflags "$ld" -o "$work/bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)
  mv "$work/bin/kube-apiserver" "$out/.kube-apiserver.tmp"
  mv "$out/.kube-apiserver.tmp" "$out/kube-apiserver"
  mv "$work/bin/kubectl" "$out/.kubectl.tmp"
  mv "$out/.kubectl.tmp" "$out/kubectl"
}

build_etcd() {
  local mod="$work/etcd"
  cp -r "$here/controlplane/etcd" "$mod"
  if ! grep -q "go.etcd.io/etcd/server/v3 ${ETCD_VERSION}" "$mod/go.mod"; then
    sed -i "s#go.etcd.io/etcd/server/v3 v[0-9.]*#go.etcd.io/etcd/server/v3 ${ETCD_VERSION}#" "$mod/go.mod"
    (cd "$mod" && go mod tidy >/dev/null)
    cp "$mod/go.mod" "$mod/go.sum" "$here/controlplane/etcd/"
  fi
  (cd "$mod" && go build -ldflags "-s -w" -o "$out/.etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$out/.etcd.tmp" "$out/etcd"
}

# etcd builds beside kube: the cores are idle while a build downloads modules or links.
etcd_pid=""
if ! ok etcd --version; then
  build_etcd &
  etcd_pid=$!
fi
if ! { ok kube-apiserver --version && ok kubectl version --client; }; then
  build_kube
fi
[ -z "$etcd_pid" ] || wait "$etcd_pid" || { echo "building etcd failed (above)" >&2; exit 1; }
echo "$out"
