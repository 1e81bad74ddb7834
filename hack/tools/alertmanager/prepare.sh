#!/usr/bin/env bash
# Run by hack/build-gotool.sh in the build's scratch module, after `go mod download` verified the
# modules against go.sum. Alertmanager embeds its web UI from ui/app/dist, which its release
# process builds with npm and which is not in the Go module: build from a copy of the module
# with a one-page placeholder UI instead (the API the tests use is unchanged).
set -euo pipefail
src="$(go list -m -f '{{.Dir}}' github.com/prometheus/alertmanager)"
cp -R "$src" alertmanager
chmod -R u+w alertmanager
for ui in elm mantine; do
  mkdir -p "alertmanager/ui/app/dist/$ui"
  echo '<!doctype html><title>Alertmanager</title><p>Built without its web UI; the API is at /api/v2/.' \
    > "alertmanager/ui/app/dist/$ui/index.html"
done
go mod edit -replace github.com/prometheus/alertmanager=./alertmanager
