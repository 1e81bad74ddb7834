#!/usr/bin/env bash
# Installs everything kubescribe's tests need on a fresh machine (idempotent): Debian packages,
# uv, the locked Python environment in .venv, the test control plane, kustomize (built from its
# Go module, for the kustomize render checks), promtool (likewise, for the alert rules' tests)
# and (as root) the single-node test cluster that runs kubescribe as a Pod, with the release
# tools (the distribution registry and cosign, from their Go modules).
#   --demo: only what hack/demo.sh uses: git, uv, the Python environment and the control plane.
set -euo pipefail
cd "$(dirname "$0")/.."

demo=false
case "${1:-}" in
  "") ;;
  --demo) demo=true ;;
  *) echo "usage: hack/setup.sh [--demo]" >&2; exit 2 ;;
esac

APT_PACKAGES=(git)
if ! $demo; then
  APT_PACKAGES+=(redis-server age openssh-server openssh-client nginx fcgiwrap tinyproxy shellcheck yamllint)
  # The single-node cluster (tests/cluster): container runtime, CNI plugins, image tooling.
  APT_PACKAGES+=(containerd runc containernetworking-plugins mmdebstrap buildah iproute2 util-linux)
  # The arm64 image is checked by running it under emulation (tests/cluster/test_image.py).
  APT_PACKAGES+=(qemu-user-static)
fi
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

UV_VERSION=0.13.9
if ! command -v uv >/dev/null || [ "$(uv --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  python3 -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
# Bytecode is compiled here: where PYTHONDONTWRITEBYTECODE is set (as in many CI images) Python
# never caches it, and every operator process the tests start would compile its imports again
# (about 1.5 s each; an e2e module of 5 tests took 74 s instead of 31).
uv sync --frozen --quiet --compile-bytecode
.venv/bin/python -m compileall -q src >/dev/null

command -v go >/dev/null || { echo "setup: Go is required to build the test control plane" >&2; exit 1; }
start=$(date +%s)
bin_dir=$(bash hack/build-controlplane.sh)
echo "setup: control plane ready in $(( $(date +%s) - start ))s: $(basename "$bin_dir")" >&2
if $demo; then
  exit 0
fi
start=$(date +%s)
kustomize_dir=$(bash hack/build-kustomize.sh)
echo "setup: kustomize ready in $(( $(date +%s) - start ))s: $(basename "$kustomize_dir")" >&2
start=$(date +%s)
promtool_dir=$(bash hack/build-promtool.sh)
echo "setup: promtool ready in $(( $(date +%s) - start ))s: $(basename "$promtool_dir")" >&2

# The cluster needs root (namespaces, mounts, cgroups); without it tests/cluster is skipped.
if [ "$(id -u)" -eq 0 ]; then
  start=$(date +%s)
  cluster_dir=$(bash hack/build-cluster.sh)
  image=$(bash hack/build-image.sh)
  echo "setup: test cluster ready in $(( $(date +%s) - start ))s: $(basename "$cluster_dir"), ${image#* }" >&2
  # The release tools (hack/release.sh and tests/cluster/test_release.py): the OCI registry
  # and the signer, from their Go modules.
  for tool in registry cosign; do
    start=$(date +%s)
    tool_dir=$(bash "hack/build-$tool.sh")
    echo "setup: $tool ready in $(( $(date +%s) - start ))s: $(basename "$tool_dir")" >&2
  done
fi
