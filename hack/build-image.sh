#!/usr/bin/env bash
# Builds the operator image from the repository's Dockerfile with buildah (no daemon, no
# registry) on the locally made Debian bookworm base (hack/build-cluster.sh), and writes it as
# an OCI archive that `ctr images import` takes. Cached by the content of the build context:
# prints the archive path and the image reference, building only when the context changed.
#
#   bash hack/build-image.sh [--arch amd64|arm64] [--kustomize]  -> <archive> <reference>
#
# --arch: the image's architecture (default amd64). Another architecture than the machine's is
# built without emulation: its Debian files come from a root unpacked by `mmdebstrap
# --variant=extract` (cached), the locked wheels are installed for it by uv, and the Dockerfile
# runs every step on the machine's own architecture.
# --kustomize: the image carries kustomize (hack/build-kustomize.sh, for the architecture), for
# `kustomize.renderCheck` (docs/kustomize.md).
# Only the `<archive> <reference>` line goes to stdout; the build's timing goes to stderr.
#
# Users build the same Dockerfile with `docker build .` (base python:3.11-slim-bookworm).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: bash hack/build-image.sh [--arch amd64|arm64] [--kustomize]" >&2; exit 2; }
arch=amd64
kustomize=false
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) [ $# -ge 2 ] || usage; arch="$2"; shift 2 ;;
    --arch=*) arch="${1#--arch=}"; shift ;;
    --kustomize) kustomize=true; shift ;;
    *) usage ;;
  esac
done
case "$arch" in
  amd64 | arm64) ;;
  *) echo "build-image: unsupported architecture '$arch' (amd64 or arm64)" >&2; exit 2 ;;
esac
host_arch="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
cache_root="${KUBESCRIBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubescribe}"
cluster_dir="${KUBESCRIBE_CLUSTER_DIR:-$(bash hack/build-cluster.sh)}"
base="$(find "$cluster_dir/images" -name 'base-bookworm-*.oci.tar' | sort | head -1)"
[ -n "$base" ] || { echo "build-image: no base image in $cluster_dir/images" >&2; exit 1; }
version="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)"
t0=$(date +%s)

# The target's Debian files when it is not the machine's architecture: an unpacked (never
# configured, nothing runs) root with the interpreter, its standard library, libstdc++ and
# util-linux (unshare), from the host's own apt sources, as an OCI archive the Dockerfile reads.
runtime=""
if [ "$arch" != "$host_arch" ]; then
  RUNTIME_PACKAGES="python3-minimal,libpython3.11-stdlib,libstdc++6,util-linux"
  runtime_key="$(printf '%s' "bookworm $arch $RUNTIME_PACKAGES" | sha256sum | cut -c1-12)"
  runtime="$cache_root/images/runtime-bookworm-$arch-$runtime_key.oci.tar"
  if [ ! -s "$runtime" ]; then
    mkdir -p "$cache_root/images"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    sources=/etc/apt/sources.list.d/debian.sources
    [ -f "$sources" ] || sources=/etc/apt/sources.list
    mmdebstrap --quiet --arch="$arch" --variant=extract --include="$RUNTIME_PACKAGES" \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      bookworm "$work/runtime.tar" "$sources" >&2
    python3 hack/cluster/mkoci.py "$runtime.tmp" "localhost/kubescribe/runtime:bookworm-$arch-$runtime_key" \
      "$work/runtime.tar" --arch "$arch" >/dev/null
    mv "$runtime.tmp" "$runtime"
    find "$cache_root/images" -name "runtime-bookworm-$arch-*.oci.tar" ! -path "$runtime" -delete
    echo "build-image: $arch runtime root in $(( $(date +%s) - t0 ))s" >&2
  fi
fi

# kustomize for the target, where the build context carries it (hack/image/bin is not in Git).
kbin=""
if [ "$kustomize" = true ]; then
  kdir="$(bash hack/build-kustomize.sh --arch "$arch")"
  kbin="hack/image/bin/linux-$arch/kustomize"
  mkdir -p "$(dirname "$kbin")"
  cmp -s "$kdir/kustomize" "$kbin" 2>/dev/null || cp "$kdir/kustomize" "$kbin"
fi

# The build context is what .dockerignore lets through: the Dockerfile, pyproject, lock, README,
# src, hack/image (the prune script; the kustomize binary only counts when it is used).
key="$( { echo "$arch $kustomize"; sha256sum Dockerfile .dockerignore pyproject.toml uv.lock README.md "$base";
          [ -z "$runtime" ] || sha256sum "$runtime"; [ -z "$kbin" ] || sha256sum "$kbin";
          find src hack/image -type f ! -path '*/__pycache__/*' ! -path 'hack/image/bin/*' -print0 |
            sort -z | xargs -0 sha256sum; } |
        sha256sum | cut -c1-12)"
suffix=""
[ "$arch" = amd64 ] || suffix="-$arch"
ref="localhost/kubescribe:${version}-${key}${suffix}"
out="$cache_root/images/kubescribe-${version}-${key}${suffix}.oci.tar"
if [ ! -s "$out" ]; then
  mkdir -p "$cache_root/images"
  # In a private mount namespace: the storage driver's mounts vanish with the command.
  store=(--root "$cache_root/buildah/storage" --runroot "$cache_root/buildah/run" --storage-driver overlay)
  # The host's CA bundle is lent to the RUN steps (not stored in the image) so that builds
  # behind a TLS-inspecting proxy reach the package index; the image keeps Debian's.
  ca=()
  [ -s /etc/ssl/certs/ca-certificates.crt ] && ca=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
  # buildah leaves BUILDPLATFORM/BUILDARCH unset (BuildKit sets them): the build stages run
  # on the machine's architecture.
  args=(--build-arg "BUILDPLATFORM=linux/$host_arch" --build-arg "BUILDARCH=$host_arch"
        --build-arg "BASE=oci-archive:$base" --build-arg "VERSION=$version" --build-arg "KUSTOMIZE=$kustomize")
  [ -z "$runtime" ] || args+=(--build-arg "RUNTIME=oci-archive:$runtime")
  bud() {
    unshare --mount --propagation private buildah "${store[@]}" bud --quiet --isolation chroot --layers "${ca[@]}" \
      --platform "linux/$arch" "${args[@]}" -t "$ref" . >&2
  }
  # Another build sharing the storage may remove a cached layer under this one ("layer not
  # known"): once more, without what it removed.
  bud || { echo "build-image: the build failed; once more" >&2; bud; }
  rm -f "$out.tmp"
  unshare --mount --propagation private buildah "${store[@]}" push --quiet "$ref" "oci-archive:$out.tmp:$ref" >&2
  mv "$out.tmp" "$out"
  # Drop older builds of this architecture from the buildah storage; the intermediate images
  # (the dependency layers of the build stage) stay for the next build.
  for old in $(unshare --mount --propagation private buildah "${store[@]}" images --format '{{.Name}}:{{.Tag}}' |
               grep '^localhost/kubescribe:' | grep -vxF "$ref" |
               if [ "$arch" = amd64 ]; then grep -E -- '-[0-9a-f]{12}$' || true; else grep -E -- "-[0-9a-f]{12}-$arch\$" || true; fi); do
    unshare --mount --propagation private buildah "${store[@]}" rmi "$old" >/dev/null 2>&1 || true
  done
  # Past a few GB, drop the intermediate images too (the next build downloads the wheels again).
  if [ "$(du -sm "$cache_root/buildah/storage" | cut -f1)" -gt "${KUBESCRIBE_BUILDAH_MAX_MB:-6000}" ]; then
    unshare --mount --propagation private buildah "${store[@]}" rmi --prune >/dev/null 2>&1 || true
  fi
  # keep only the newest few archives (of both architectures)
  find "$cache_root/images" -name 'kubescribe-*.oci.tar' -printf '%T@ %p\n' | sort -rn |
    tail -n +7 | cut -d' ' -f2- | xargs -r rm -f
  echo "build-image: $ref in $(( $(date +%s) - t0 ))s, $(du -m "$out" | cut -f1) MB archive" >&2
fi
echo "$out $ref"
