#!/usr/bin/env bash
# Builds cosign (github.com/sigstore/cosign/v2, cmd/cosign; version in hack/tools/cosign/go.mod)
# into ${KUBESCRIBE_CACHE:-~/.cache/kubescribe}/tools/cosign-<version>/ and prints that
# directory. hack/release.sh signs with it. Idempotent.
set -euo pipefail
exec bash "$(dirname "$0")/build-gotool.sh" cosign github.com/sigstore/cosign/v2 \
  github.com/sigstore/cosign/v2/cmd/cosign version
