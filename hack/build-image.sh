#!/usr/bin/env bash
# Builds the operator image from the repository's Dockerfile with buildah (no daemon, no
# registry) on the locally made Debian bookworm base (hack/build-cluster.sh), and writes it as
# an OCI archive that `ctr images import` takes. Cached by the content of the build context:
# prints the archive path and the image reference, building only when the context changed.
#
#   bash hack/build-image.sh            -> <archive> <reference>
#
# Users build the same Dockerfile with `docker build .` (base python:3.11-slim-bookworm).
set -euo pipefail
cd "$(dirname "$0")/.."
cache_root="${KUBESCRIBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubescribe}"
cluster_dir="${KUBESCRIBE_CLUSTER_DIR:-$(bash hack/build-cluster.sh)}"
base="$(find "$cluster_dir/images" -name 'base-bookworm-*.oci.tar' | sort | head -1)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)"
# The build context is what .dockerignore lets through: the Dockerfile, pyproject, lock, README, src.
key="$( { sha256sum Dockerfile .dockerignore pyproject.toml uv.lock README.md "$base";
          find src -type f ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum; } |
        sha256sum | cut -c1-12)"
ref="localhost/kubescribe:${version}-${key}"
out="$cache_root/images/kubescribe-${version}-${key}.oci.tar"
if [ ! -s "$out" ]; then
  mkdir -p "$cache_root/images"
  # In a private mount namespace: the storage driver's mounts vanish with the command.
  store=(--root "$cache_root/buildah/storage" --runroot "$cache_root/buildah/run" --storage-driver overlay)
  # The host's CA bundle is lent to the RUN steps (not stored in the image) so that builds
  # behind a TLS-inspecting proxy reach the package index; the image keeps Debian's.
  ca=()
  [ -s /etc/ssl/certs/ca-certificates.crt ] && ca=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
  t0=$(date +%s)
  unshare --mount --propagation private buildah "${store[@]}" bud --quiet --isolation chroot --layers "${ca[@]}" \
    --build-arg "BASE=oci-archive:$base" --build-arg "VERSION=$version" -t "$ref" . >&2
  rm -f "$out.tmp"
  unshare --mount --propagation private buildah "${store[@]}" push --quiet "$ref" "oci-archive:$out.tmp:$ref" >&2
  mv "$out.tmp" "$out"
  # Drop older builds from the buildah storage (the dependency layer stays while it is used).
  for old in $(unshare --mount --propagation private buildah "${store[@]}" images --format '{{.Name}}:{{.Tag}}' |
               grep '^localhost/kubescribe:' | grep -vxF "$ref"); do
    unshare --mount --propagation private buildah "${store[@]}" rmi "$old" >/dev/null 2>&1 || true
  done
  unshare --mount --propagation private buildah "${store[@]}" rmi --prune >/dev/null 2>&1 || true
  # keep only the newest few archives
  find "$cache_root/images" -name 'kubescribe-*.oci.tar' -printf '%T@ %p\n' | sort -rn |
    tail -n +4 | cut -d' ' -f2- | xargs -r rm -f
  echo "build-image: $ref in $(( $(date +%s) - t0 ))s, $(du -m "$out" | cut -f1) MB archive" >&2
fi
echo "$out $ref"
