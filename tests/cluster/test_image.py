"""The image carries its version, licence and source as OCI labels, and an SBOM of the locked
dependencies (CycloneDX, generated from uv.lock at build time)."""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

import kubescribe
from tests.cluster.conftest import Image


def _blob(archive: tarfile.TarFile, digest: str) -> bytes:
    member = archive.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}")
    assert member is not None
    return member.read()


def test_the_image_is_labelled_and_carries_an_sbom(image: Image) -> None:
    with tarfile.open(image.archive) as archive:
        index = json.loads(_blob_named(archive, "index.json"))
        manifest = json.loads(_blob(archive, index["manifests"][0]["digest"]))
        config: dict[str, Any] = json.loads(_blob(archive, manifest["config"]["digest"]))
        labels = config["config"]["Labels"]
        assert labels["org.opencontainers.image.version"] == kubescribe.__version__
        assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
        sbom_path = labels["io.kubescribe.sbom"].lstrip("/")
        sbom = None
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(_blob(archive, layer["digest"]))) as files:
                if sbom_path in files.getnames():
                    found = files.extractfile(sbom_path)
                    assert found is not None
                    sbom = json.loads(found.read())
    assert sbom is not None, "no SBOM in the image"
    assert sbom["bomFormat"] == "CycloneDX"
    names = {c["name"] for c in sbom["components"]}
    assert {"pygit2", "aiohttp", "pydantic", "google-re2"} <= names


def _blob_named(archive: tarfile.TarFile, name: str) -> bytes:
    member = archive.extractfile(name)
    assert member is not None
    return member.read()
