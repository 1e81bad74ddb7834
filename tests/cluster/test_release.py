"""The release, consumed as a user would: `hack/release.sh` pushes the image index and the chart
to a real OCI registry on loopback (the CNCF distribution registry, devenv.registry); the node's
containerd pulls the image from it (nothing side-loaded under that name); `helm install
oci://...` installs the chart; cosign verifies the signatures and attestations with the release's
public key and refuses another key; a ConfigMap change reaches the SSH remote authored by the
user who made it."""

from __future__ import annotations

import hashlib
import json
import tarfile
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from kubescribe_devenv.cluster import Cluster
from kubescribe_devenv.controlplane import REPO_ROOT
from tests.cluster.conftest import (
    NAMESPACE,
    Release,
    Repo,
    User,
    attribution_values,
    commit_mentioning,
    data_of,
    record,
    wire_apiserver,
)
from tests.cluster.published import ARCHES, INDEX, VERSION, Published, run
from tests.support import wait_condition, wait_for

# One release for the module: its tests run on one pytest worker (--dist loadgroup).
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200), pytest.mark.xdist_group("release")]


def test_release_files_checksums_notes_and_index(published: Published) -> None:
    out = published.out
    run("sha256sum", "-c", "SHA256SUMS", cwd=out)
    sums = (out / "SHA256SUMS").read_text()
    chart_tgz = out / f"kubescribe-{VERSION}.tgz"
    for name in (chart_tgz.name, *(f"kubescribe-{VERSION}-linux-{a}.oci.tar" for a in ARCHES)):
        assert f"  {name}\n" in sums
    # SHA256SUMS is signed with the release key
    run(str(published.cosign), "verify-blob", "--key", str(published.public_key),
        "--insecure-ignore-tlog=true", "--signature", str(out / "SHA256SUMS.sig"),
        str(out / "SHA256SUMS"), env=published.env)  # fmt: skip
    assert published.verify("verify-blob", "--signature", str(out / "SHA256SUMS.sig"),
                            str(out / "SHA256SUMS"), key=published.other_public_key
                            ).returncode != 0  # fmt: skip

    # the chart: one version for chart, app and image; it points at the published image
    with tarfile.open(chart_tgz) as tgz:
        chart = yaml.safe_load(tgz.extractfile("kubescribe/Chart.yaml").read())  # type: ignore[union-attr]
        values = yaml.safe_load(tgz.extractfile("kubescribe/values.yaml").read())  # type: ignore[union-attr]
    assert chart["version"] == chart["appVersion"] == VERSION
    assert values["image"]["repository"] == published.info["image"]["repository"]

    # the release notes are the CHANGELOG section of the version
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    section = changelog.split(f"\n## {VERSION} ", 1)[1].split("\n## ", 1)[0]
    first_entry = next(line for line in section.splitlines()[1:] if line.strip())
    notes = (out / "RELEASE-NOTES.md").read_text()
    assert notes.startswith(f"# kubescribe {VERSION}\n")
    assert first_entry in notes
    assert "Unreleased" not in notes
    assert published.info["image"]["digest"] in notes

    # the registry holds an OCI image index of the architectures, under the version's tag
    repository = published.info["image"]["repository"].split("/", 1)[1]
    status, headers, body = published.registry.get(f"/v2/{repository}/manifests/{VERSION}", INDEX)
    assert status == 200, body
    assert headers["Docker-Content-Digest"] == published.info["image"]["digest"]
    assert "sha256:" + hashlib.sha256(body).hexdigest() == published.info["image"]["digest"]
    index = json.loads(body)
    assert index["mediaType"] == INDEX
    platforms = sorted(m["platform"]["architecture"] for m in index["manifests"])
    assert platforms == sorted(ARCHES)
    # and the SBOM attached is the image's own
    sbom = json.loads((out / "sbom.cdx.json").read_text())
    assert sbom["bomFormat"] == "CycloneDX"


def test_signatures_and_attestations_verify_with_the_release_key_only(
    published: Published,
) -> None:
    for ref in (published.image, published.chart):
        done = published.verify("verify", ref)
        assert done.returncode == 0, done.stderr
        assert published.verify("verify", ref, key=published.other_public_key).returncode != 0
    # every image of the index is signed too (cosign sign --recursive)
    repository = published.info["image"]["repository"]
    _, _, body = published.registry.get(
        f"/v2/{repository.split('/', 1)[1]}/manifests/{published.info['image']['digest']}", INDEX
    )
    for manifest in json.loads(body)["manifests"]:
        done = published.verify("verify", f"{repository}@{manifest['digest']}")
        assert done.returncode == 0, done.stderr
    for kind in ("cyclonedx", "slsaprovenance1"):
        done = published.verify("verify-attestation", "--type", kind, published.image)
        assert done.returncode == 0, done.stderr
        done = published.verify(
            "verify-attestation", "--type", kind, published.image, key=published.other_public_key
        )
        assert done.returncode != 0
    # a signature that verifies is bound to its digest: the chart's does not sign the image
    chart_sigs = published.verify("verify", published.chart)
    payloads: list[dict[str, Any]] = []
    for line in chart_sigs.stdout.splitlines():
        if line.strip():
            parsed = json.loads(line)
            payloads.extend(parsed if isinstance(parsed, list) else [parsed])
    signed = {p["critical"]["image"]["docker-manifest-digest"] for p in payloads}
    assert signed == {published.info["chart"]["digest"]}


def pulled_event(cluster: Cluster, pod: str) -> str:
    events = cluster.get_json("events", "-n", NAMESPACE, "--field-selector",
                              f"involvedObject.name={pod}")["items"]  # fmt: skip
    return next((e["message"] for e in events if e["reason"] == "Pulled"), "")


def test_pulled_installed_from_the_registry_and_mirrors_with_attribution(
    published: Published, cluster: Cluster, repo: Repo, install: Callable[..., Release]
) -> None:
    image = published.info["image"]
    ref = f"{image['repository']}:{VERSION}"
    repository = image["repository"].split("/", 1)[1]
    before = len(published.registry.manifest_requests(repository))

    ns = "team-release"
    cluster.kubectl("create", "namespace", ns)
    name = "rel"
    confdir = cluster.workdir / "kubescribe-apiserver-release"
    chart = f"oci://{published.info['chart']['repository'].rsplit('/', 1)[0]}/kubescribe"
    t0 = time.monotonic()
    rel = install(
        name,
        *attribution_values(name, ns, confdir),
        # pulled now, also when the quickstart pulled it before (the same release group)
        "image.pullPolicy=Always",
        chart=chart,
        helm_args=("--version", VERSION, "--plain-http"),
    )
    record("helm install oci:// --wait (pull from the loopback registry)", time.monotonic() - t0)

    [pod] = rel.pods()
    [status] = pod["status"]["containerStatuses"]
    assert status["image"] == ref
    # containerd pulled it: kubelet's event, the registry's log, containerd's image list
    message = wait_for(lambda: pulled_event(cluster, pod["metadata"]["name"]), timeout=30,
                       what="the Pulled event")  # fmt: skip
    assert message.startswith(f'Successfully pulled image "{ref}"'), message
    served = published.registry.manifest_requests(repository)[before:]
    assert any("containerd" in str(r.get("http.request.useragent")) for r in served), served
    assert ref in cluster.image_names()
    assert status["imageID"] == f"{image['repository']}@{image['digest']}", status["imageID"]

    # the change of a user reaches the SSH remote with that user as author
    wire_apiserver(cluster, name, confdir)
    bob = User(cluster, "bob")
    bob.grant(ns, "create,update,patch,get", "configmaps")
    cluster.kubectl(
        "apply", "-f", "-", input=repo.mirror(ns, attribution={"mode": "attributed-author"})
    )
    wait_condition(cluster, "gittarget", "mirror", ns, "Ready", "True", timeout=90)  # type: ignore[arg-type]
    bob.kubectl("create", "configmap", "by-bob", "-n", ns, "--from-literal=released=yes")
    commit = commit_mentioning(repo, "by-bob")
    assert commit["author"] == "bob", commit
    assert commit["committer"] != "bob"
    assert data_of(repo, ns, "by-bob") == {"released": "yes"}


def test_the_side_loaded_image_still_starts_after_its_pull_by_another_name(
    published: Published, cluster: Cluster, install: Callable[..., Release]
) -> None:
    """The node now holds the released image (same ID) under the registry's name, pulled by the
    kubelet: an install naming the side-loaded name with `pullPolicy: Never` must still start
    (it failed with ErrImageNeverPull under the kubelet's default pull-credential checks)."""
    pulled = f"{published.info['image']['repository']}:{VERSION}"
    assert pulled in cluster.image_names()  # the test above pulled it
    rel = install("side-loaded")
    [pod] = rel.pods()
    [status] = pod["status"]["containerStatuses"]
    assert status["ready"], status
    assert pod["spec"]["containers"][0]["image"] != pulled
