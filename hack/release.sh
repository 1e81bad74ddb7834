#!/usr/bin/env bash
# Makes every artifact of a release from one command (docs/releasing.md):
#
#   REGISTRY=registry.example.com/kubescribe COSIGN_KEY=cosign.key COSIGN_PASSWORD=... \
#     bash hack/release.sh X.Y.Z
#
# - the image of each architecture in ARCHES (hack/build-image.sh), pushed as one OCI image
#   index $REGISTRY/kubescribe:X.Y.Z (buildah manifest);
# - the chart packaged with version = appVersion = X.Y.Z and its image.repository set to
#   $REGISTRY/kubescribe, pushed as the OCI artifact oci://$REGISTRY/charts/kubescribe:X.Y.Z;
# - cosign signatures of the image index (and each of its images) and of the chart, the image's
#   CycloneDX SBOM and a SLSA provenance as signed attestations of the index: key-based, without
#   a transparency log (--tlog-upload=false);
# - in $OUT (default dist/X.Y.Z): the chart .tgz, the image archives, the SBOM, the provenance,
#   cosign.pub, SHA256SUMS (+ SHA256SUMS.sig), RELEASE-NOTES.md (the CHANGELOG section of X.Y.Z
#   and the artifacts' digests) and release.json (references and digests, for scripts).
#
# Environment:
#   REGISTRY         where to push (host[:port]/path), required. Loopback hosts (127.0.0.1,
#                    localhost, [::1]) are spoken to over plain HTTP, every other over TLS.
#                    Log in beforehand with the tools' own commands (docs/releasing.md).
#   COSIGN_KEY       the cosign private key (`cosign generate-key-pair`), required;
#   COSIGN_PASSWORD  its password (may be empty when the key has none), required to be set.
#   ARCHES           architectures of the image index, default "amd64 arm64".
#   OUT              output directory, default dist/X.Y.Z (replaced when it exists).
#   HELM             the helm binary; default: on PATH, else the test cluster's (build-cluster.sh).
#   SOURCE           the repository's URL, recorded in the provenance (optional).
set -euo pipefail
cd "$(dirname "$0")/.."
t_start=$(date +%s)

die() { echo "release: $*" >&2; exit 1; }
[ "$#" -eq 1 ] || die "usage: hack/release.sh X.Y.Z (see docs/releasing.md)"
version="$1"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  die "version '$version' is not semantic (X.Y.Z or X.Y.Z-pre)"
registry="${REGISTRY:-}"
[ -n "$registry" ] || die "set REGISTRY to host[:port]/path (where the image and the chart go)"
registry="${registry%/}"
registry_re='^[][A-Za-z0-9.:-]+(/[a-z0-9._/-]+)?$'
[[ "$registry" =~ $registry_re ]] || die "REGISTRY '$registry' is not host[:port][/path]"
[ -n "${COSIGN_KEY:-}" ] || die "set COSIGN_KEY to the cosign private key (cosign generate-key-pair)"
[ -f "$COSIGN_KEY" ] || die "COSIGN_KEY: no such file: $COSIGN_KEY"
[ -n "${COSIGN_PASSWORD+set}" ] || die "set COSIGN_PASSWORD (the key's password; empty for none)"
export COSIGN_PASSWORD
cosign_key="$(cd "$(dirname "$COSIGN_KEY")" && pwd)/$(basename "$COSIGN_KEY")"
read -r -a arches <<<"${ARCHES:-amd64 arm64}"
[ "${#arches[@]}" -gt 0 ] || die "ARCHES is empty"
for arch in "${arches[@]}"; do
  [[ "$arch" =~ ^(amd64|arm64)$ ]] || die "unsupported architecture '$arch' in ARCHES (amd64, arm64)"
done

# One version names everything (tests/unit/test_versions.py): the image says what pyproject says.
project_version="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)"
[ "$project_version" = "$version" ] ||
  die "pyproject.toml says $project_version, not $version: set the version first (docs/releasing.md)"
notes_section="$(awk -v v="$version" '
  /^## / { if (on) exit; if (index($0, "## " v " ") == 1) { on = 1; next } }
  on { print }' CHANGELOG.md)"
[ -n "$(echo "$notes_section" | tr -d '[:space:]')" ] ||
  die "CHANGELOG.md has no '## $version — YYYY-MM-DD' section (cut it from Unreleased first)"

host="${registry%%/*}"
case "$host" in
  127.0.0.1 | 127.0.0.1:* | localhost | localhost:* | "[::1]" | "[::1]:"*) plain_http=true ;;
  *) plain_http=false ;;
esac
image_repo="$registry/kubescribe"
chart_repo="$registry/charts"
out="${OUT:-dist/$version}"
rm -rf "$out"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
cleanup() {
  [ -n "${store:-}" ] && unshare --mount --propagation private buildah "${store[@]}" rm --all >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

step_t0=0
step() { step_t0=$(date +%s); echo "release: $*" >&2; }
took() { echo "release:   done in $(( $(date +%s) - step_t0 ))s" >&2; }

step "tools: cosign, helm"
cosign="$(bash hack/build-cosign.sh)/cosign"
if [ -z "${HELM:-}" ]; then
  HELM="$(command -v helm || true)"
  [ -n "$HELM" ] || HELM="$(bash hack/build-cluster.sh)/bin/helm"
fi
[ -x "$HELM" ] || die "no helm binary ($HELM)"
cosign_flags=(--yes --key "$cosign_key" --tlog-upload=false)
insecure_cosign=()
buildah_tls=()
helm_http=()
if $plain_http; then
  insecure_cosign=(--allow-http-registry --allow-insecure-registry)
  buildah_tls=(--tls-verify=false)
  helm_http=(--plain-http)
fi
took

# -- images --------------------------------------------------------------------------------
archives=()
for arch in "${arches[@]}"; do
  step "image linux/$arch (hack/build-image.sh)"
  if [ "$arch" = amd64 ]; then
    built="$(bash hack/build-image.sh)"
  else
    built="$(bash hack/build-image.sh --arch "$arch")"
  fi
  read -r archive ref <<<"$(echo "$built" | tail -1)"
  [ -s "$archive" ] || die "build-image.sh printed no archive for $arch: $built"
  got="$(python3 hack/oci-archive.py platform "$archive")"
  [ "$got" = "linux/$arch" ] || die "the $arch build is a $got image ($archive, $ref)"
  name="kubescribe-$version-linux-$arch.oci.tar"
  ln -f "$archive" "$out/$name" 2>/dev/null || cp "$archive" "$out/$name"
  archives+=("$out/$name")
  took
done

step "push the image index $image_repo:$version (${arches[*]})"
# A throwaway buildah store (vfs: nothing is mounted, the list holds references only).
store=(--root "$work/buildah/storage" --runroot "$work/buildah/run" --storage-driver vfs)
list="localhost/kubescribe-release:$version"
unshare --mount --propagation private buildah "${store[@]}" manifest create "$list" >/dev/null
for archive in "${archives[@]}"; do
  unshare --mount --propagation private buildah "${store[@]}" manifest add "$list" "oci-archive:$archive" >/dev/null
done
unshare --mount --propagation private buildah "${store[@]}" manifest push --quiet --all --format oci \
  "${buildah_tls[@]}" --digestfile "$work/index.digest" "$list" "docker://$image_repo:$version" >&2
image_digest="$(cat "$work/index.digest")"
[[ "$image_digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "no digest from the index push: $image_digest"
took

# -- chart ---------------------------------------------------------------------------------
step "package and push the chart oci://$chart_repo/kubescribe:$version"
cp -r charts/kubescribe "$work/kubescribe"
# The published chart points at the published image (its tag is the appVersion).
sed -i "0,/^  repository: .*/s##  repository: $image_repo#" "$work/kubescribe/values.yaml"
grep -qx "  repository: $image_repo" "$work/kubescribe/values.yaml" ||
  die "could not set image.repository in the chart's values.yaml"
"$HELM" lint --quiet "$work/kubescribe" >/dev/null
"$HELM" package "$work/kubescribe" --version "$version" --app-version "$version" -d "$out" >/dev/null
chart_tgz="$out/kubescribe-$version.tgz"
[ -s "$chart_tgz" ] || die "helm package made no $chart_tgz"
"$HELM" push "$chart_tgz" "oci://$chart_repo" "${helm_http[@]}" >"$work/helm-push.log" 2>&1 ||
  die "helm push failed: $(cat "$work/helm-push.log")"
chart_digest="$(sed -n 's/^Digest: \(sha256:[0-9a-f]\{64\}\)$/\1/p' "$work/helm-push.log")"
[ -n "$chart_digest" ] || die "no digest in helm push's output: $(cat "$work/helm-push.log")"
took

# -- signatures and attestations -----------------------------------------------------------
step "sign the image index, its images and the chart (cosign, key-based, no transparency log)"
"$cosign" public-key --key "$cosign_key" >"$out/cosign.pub"
"$cosign" sign "${cosign_flags[@]}" "${insecure_cosign[@]}" --recursive "$image_repo@$image_digest" 2>"$work/cosign.log" ||
  die "cosign sign (image) failed: $(cat "$work/cosign.log")"
"$cosign" sign "${cosign_flags[@]}" "${insecure_cosign[@]}" "$chart_repo/kubescribe@$chart_digest" 2>"$work/cosign.log" ||
  die "cosign sign (chart) failed: $(cat "$work/cosign.log")"
took

step "attest the SBOM and the provenance of the image index"
python3 hack/oci-archive.py extract "${archives[0]}" /opt/kubescribe/share/kubescribe/sbom.cdx.json >"$out/sbom.cdx.json"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
dirty=false
[ -z "$(git status --porcelain 2>/dev/null)" ] || dirty=true
VERSION="$version" IMAGE="$image_repo" IMAGE_DIGEST="$image_digest" CHART="$chart_repo/kubescribe" \
  CHART_DIGEST="$chart_digest" COMMIT="$commit" DIRTY="$dirty" STARTED="$t_start" \
  ARCHES="${arches[*]}" python3 - "${archives[@]}" >"$out/provenance.slsa.json" <<'PY'
import hashlib, json, os, sys, time
from datetime import datetime, timezone

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

def stamp(seconds):
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

e = os.environ
print(json.dumps({
    "buildDefinition": {
        "buildType": "https://kubescribe.io/release/hack-release-sh/v1",
        "externalParameters": {"version": e["VERSION"], "arches": e["ARCHES"].split()},
        "internalParameters": {"worktreeDirty": e["DIRTY"] == "true"},
        "resolvedDependencies": [
            {"name": "source", "digest": {"gitCommit": e["COMMIT"]},
             **({"uri": "git+" + e["SOURCE"]} if e.get("SOURCE") else {})},
            *({"name": os.path.basename(p), "digest": {"sha256": sha256(p)}} for p in sys.argv[1:]),
        ],
    },
    "runDetails": {
        "builder": {"id": "https://kubescribe.io/release/hack-release-sh"},
        "metadata": {"startedOn": stamp(int(e["STARTED"])), "finishedOn": stamp(time.time())},
        "byproducts": [
            {"name": "image", "uri": e["IMAGE"], "digest": {"sha256": e["IMAGE_DIGEST"].split(":")[1]}},
            {"name": "chart", "uri": e["CHART"], "digest": {"sha256": e["CHART_DIGEST"].split(":")[1]}},
        ],
    },
}, indent=1))
PY
"$cosign" attest "${cosign_flags[@]}" "${insecure_cosign[@]}" --type cyclonedx \
  --predicate "$out/sbom.cdx.json" "$image_repo@$image_digest" 2>"$work/cosign.log" ||
  die "cosign attest (SBOM) failed: $(cat "$work/cosign.log")"
"$cosign" attest "${cosign_flags[@]}" "${insecure_cosign[@]}" --type slsaprovenance1 \
  --predicate "$out/provenance.slsa.json" "$image_repo@$image_digest" 2>"$work/cosign.log" ||
  die "cosign attest (provenance) failed: $(cat "$work/cosign.log")"
took

# -- checksums and notes -------------------------------------------------------------------
step "checksums and release notes in $out"
(cd "$out" && sha256sum -- "kubescribe-$version.tgz" kubescribe-"$version"-linux-*.oci.tar \
  sbom.cdx.json provenance.slsa.json >SHA256SUMS)
"$cosign" sign-blob --yes --key "$cosign_key" --tlog-upload=false --output-signature "$out/SHA256SUMS.sig" \
  "$out/SHA256SUMS" 2>"$work/cosign.log" || die "cosign sign-blob failed: $(cat "$work/cosign.log")"
chmod 644 "$out/SHA256SUMS.sig"
verify_flags="--key cosign.pub --insecure-ignore-tlog=true"
$plain_http && verify_flags="$verify_flags --allow-http-registry --allow-insecure-registry"
{
  echo "# kubescribe $version"
  echo
  echo "$notes_section" | sed -e '/./,$!d'
  echo
  echo "## Artifacts"
  echo
  echo "- Image (${arches[*]}): \`$image_repo:$version\` (\`$image_repo@$image_digest\`)"
  echo "- Chart: \`helm install kubescribe oci://$chart_repo/kubescribe --version $version${helm_http[*]:+ ${helm_http[*]}}\`"
  echo "  (\`$chart_repo/kubescribe@$chart_digest\`)"
  echo "- Verify (the public key is \`cosign.pub\`; signatures are not in a transparency log):"
  echo
  echo '  ```'
  echo "  cosign verify $verify_flags $image_repo@$image_digest"
  echo "  cosign verify $verify_flags $chart_repo/kubescribe@$chart_digest"
  echo "  cosign verify-attestation $verify_flags --type cyclonedx $image_repo@$image_digest"
  echo "  cosign verify-blob --key cosign.pub --insecure-ignore-tlog=true --signature SHA256SUMS.sig SHA256SUMS"
  echo "  sha256sum -c SHA256SUMS"
  echo '  ```'
} >"$out/RELEASE-NOTES.md"
VERSION="$version" IMAGE="$image_repo" IMAGE_DIGEST="$image_digest" CHART="$chart_repo/kubescribe" \
  CHART_DIGEST="$chart_digest" ARCHES="${arches[*]}" python3 -c '
import json, os
e = os.environ
print(json.dumps({
    "version": e["VERSION"], "arches": e["ARCHES"].split(),
    "image": {"repository": e["IMAGE"], "tag": e["VERSION"], "digest": e["IMAGE_DIGEST"]},
    "chart": {"repository": e["CHART"], "version": e["VERSION"], "digest": e["CHART_DIGEST"]},
}, indent=1))' >"$out/release.json"
took

echo "release: $version in $(( $(date +%s) - t_start ))s: $image_repo@$image_digest, oci://$chart_repo/kubescribe:$version, $out" >&2
echo "$out"
