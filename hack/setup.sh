#!/usr/bin/env bash
# Installs everything kubescribe's tests need on a fresh machine (idempotent): Debian packages,
# uv, the locked Python environment in .venv, the test control plane, kustomize (built from its
# Go module, for the kustomize render checks), promtool (likewise, for the alert rules' tests),
# Alertmanager (likewise, for the Alert receiver tests) and (as root) the single-node test
# cluster that runs kubescribe as a Pod, with the release tools (the distribution registry and
# cosign, from their Go modules).
#   --demo: only what hack/demo.sh uses: git, uv, the Python environment and the control plane.
#   --no-cluster: everything but hack/setup-cluster.sh (hack/test.sh runs that beside the tests
#                 that do not need it).
set -euo pipefail
cd "$(dirname "$0")/.."

demo=false no_cluster=false
case "${1:-}" in
  "") ;;
  --demo) demo=true ;;
  --no-cluster) no_cluster=true ;;
  *) echo "usage: hack/setup.sh [--demo | --no-cluster]" >&2; exit 2 ;;
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
# kustomize, promtool and Alertmanager (smaller builds) go beside the control plane's, whose
# module downloads leave the cores idle for a while.
tools_pid=""
if ! $demo; then
  (
    for tool in kustomize promtool alertmanager; do
      start=$(date +%s)
      tool_dir=$(bash "hack/build-$tool.sh")
      echo "setup: $tool ready in $(( $(date +%s) - start ))s: $(basename "$tool_dir")" >&2
    done
  ) &
  tools_pid=$!
fi
start=$(date +%s)
bin_dir=$(bash hack/build-controlplane.sh)
echo "setup: control plane ready in $(( $(date +%s) - start ))s: $(basename "$bin_dir")" >&2
[ -z "$tools_pid" ] || wait "$tools_pid" || { echo "setup: building kustomize, promtool or Alertmanager failed (above)" >&2; exit 1; }
if $demo; then
  exit 0
fi

# The cluster needs root (namespaces, mounts, cgroups); without it tests/cluster is skipped.
if ! $no_cluster && [ "$(id -u)" -eq 0 ]; then
  bash hack/setup-cluster.sh
fi
