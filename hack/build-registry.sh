#!/usr/bin/env bash
# Builds the CNCF distribution registry (github.com/distribution/distribution/v3, cmd/registry;
# version in hack/tools/registry/go.mod) into ${KUBESCRIBE_CACHE:-~/.cache/kubescribe}/tools/
# registry-<version>/ and prints that directory. The release tests run it on loopback
# (kubescribe_devenv.registry). Idempotent.
set -euo pipefail
exec bash "$(dirname "$0")/build-gotool.sh" registry github.com/distribution/distribution/v3 \
  github.com/distribution/distribution/v3/cmd/registry --version
