#!/usr/bin/env bash
# Builds what the single-node test cluster needs beyond the control plane, into a per-machine
# cache keyed by version (like hack/build-controlplane.sh): kubelet, kube-controller-manager and
# kube-scheduler from the Kubernetes Go module, helm from its Go module, the Pod sandbox image
# (a static Go `pause`) and the Debian bookworm + Python 3.11 base image (mmdebstrap) as OCI
# archives. Idempotent: prints the cache folder, building only what is missing.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
here="$(cd "$(dirname "$0")" && pwd)"
cache_root="${KUBESCRIBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubescribe}"
out="$cache_root/cluster/${KUBE_VERSION}-helm${HELM_VERSION}"
# The base image's package set; a change here is a new cache key.
BASE_PACKAGES="python3,python3-venv,ca-certificates,libstdc++6"
base_key="$(printf '%s' "bookworm $BASE_PACKAGES" | sha256sum | cut -c1-12)"
base="$out/images/base-bookworm-$base_key.oci.tar"

ok() { [ -x "$out/bin/$1" ] && "$out/bin/$1" "${@:2}" >/dev/null 2>&1; }
have_all() {
  ok kubelet --version && ok kube-controller-manager --version && ok kube-scheduler --version &&
    ok helm version && [ -s "$out/images/pause.oci.tar" ] && [ -s "$base" ]
}
if have_all; then
  echo "$out"
  exit 0
fi
mkdir -p "$out/bin" "$out/images"
command -v go >/dev/null || { echo "go is required to build the test cluster" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
staging="v0.${KUBE_VERSION#v1.}"
step() { echo "build-cluster: $*" >&2; }

# Same tool-module trick as the control plane: kubernetes' staging modules need replace lines.
generate_kube_gomod() {
  local mod="$1" kmod
  go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" >/dev/null
  kmod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/${KUBE_VERSION}.mod"
  {
    echo "module kubescribe.io/cluster/kube"
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
  cp "$mod/go.mod" "$mod/go.sum" "$here/cluster/kube/"
}

build_kube() {
  local mod="$work/kube" ld c
  cp -r "$here/cluster/kube" "$mod"
  if ! grep -qE "^[[:space:]]*(require )?k8s.io/kubernetes ${KUBE_VERSION}( |$)" "$mod/go.mod" || [ ! -s "$mod/go.sum" ]; then
    generate_kube_gomod "$mod"
  fi
  (cd "$mod" && go mod download)
  ld="-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION}"
  for c in kubelet kube-controller-manager kube-scheduler; do
    ok "$c" --version && continue
    step "$c"
    (cd "$mod" && go build -ldflags "$ld" -o "$out/bin/.$c.tmp" "k8s.io/kubernetes/cmd/$c")
    mv "$out/bin/.$c.tmp" "$out/bin/$c"
  done
}

build_helm() {
  local mod="$work/helm"
  cp -r "$here/cluster/helm" "$mod"
  if ! grep -q "helm.sh/helm/v3 ${HELM_VERSION}" "$mod/go.mod" || [ ! -s "$mod/go.sum" ]; then
    printf 'module kubescribe.io/cluster/helm\n\ngo 1.26.0\n\nrequire helm.sh/helm/v3 %s\n' "$HELM_VERSION" >"$mod/go.mod"
    (cd "$mod" && go mod tidy >/dev/null)
    cp "$mod/go.mod" "$mod/go.sum" "$here/cluster/helm/"
  fi
  (cd "$mod" && go mod download)
  step helm
  (cd "$mod" && go build -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" -o "$out/bin/.helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$out/bin/.helm.tmp" "$out/bin/helm"
}

build_pause() {
  step "pause image"
  mkdir -p "$work/pause-root"
  (cd "$here/cluster/pause" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/pause-root/pause" .)
  tar --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/pause-root" -cf "$work/pause-layer.tar" pause
  python3 "$here/cluster/mkoci.py" "$out/images/.pause.tmp" localhost/kubescribe/pause:local \
    "$work/pause-layer.tar" --entrypoint '["/pause"]'
  mv "$out/images/.pause.tmp" "$out/images/pause.oci.tar"
}

# Debian bookworm with python3 from the host's own apt sources: the base the Dockerfile is built on
# here (users build on python:3.11-slim-bookworm or any bookworm image with python3 3.11).
build_base() {
  step "base image (mmdebstrap bookworm: $BASE_PACKAGES)"
  local sources=/etc/apt/sources.list.d/debian.sources
  [ -f "$sources" ] || sources=/etc/apt/sources.list
  mmdebstrap --quiet --variant=essential --include="$BASE_PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    bookworm "$work/base-rootfs.tar" "$sources"
  python3 "$here/cluster/mkoci.py" "$out/images/.base.tmp" "localhost/kubescribe/base:bookworm-$base_key" \
    "$work/base-rootfs.tar" --cmd '["python3"]'
  mv "$out/images/.base.tmp" "$base"
  # one base: build-image.sh and the cluster fixture take the one that is there
  find "$out/images" -name 'base-bookworm-*.oci.tar' ! -path "$base" -delete
}

{ ok kubelet --version && ok kube-controller-manager --version && ok kube-scheduler --version; } || build_kube
ok helm version || build_helm
[ -s "$out/images/pause.oci.tar" ] || build_pause
[ -s "$base" ] || build_base
echo "$out"
