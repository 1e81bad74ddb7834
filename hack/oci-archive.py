"""Reads an OCI image archive (the tar `buildah push ... oci-archive:` writes) without a
container tool; hack/release.sh uses it.

    python3 hack/oci-archive.py platform ARCHIVE        -> os/architecture[/variant]
    python3 hack/oci-archive.py extract ARCHIVE PATH    -> the file PATH of the image on stdout
"""

from __future__ import annotations

import json
import sys
import tarfile
from typing import IO, Any


def blob(archive: tarfile.TarFile, digest: str) -> IO[bytes]:
    algorithm, _, value = digest.partition(":")
    member = archive.extractfile(f"blobs/{algorithm}/{value}")
    if member is None:
        raise SystemExit(f"oci-archive: blob {digest} is missing")
    return member


def manifest(archive: tarfile.TarFile) -> dict[str, Any]:
    index = json.load(archive.extractfile("index.json") or sys.exit("oci-archive: no index.json"))
    found = index.get("manifests") or []
    if len(found) != 1:
        raise SystemExit(f"oci-archive: expected one image in the archive, found {len(found)}")
    doc: dict[str, Any] = json.load(blob(archive, found[0]["digest"]))
    if "layers" not in doc:
        raise SystemExit("oci-archive: the archive holds an index, not an image manifest")
    return doc


def platform(archive: tarfile.TarFile) -> str:
    config = json.load(blob(archive, manifest(archive)["config"]["digest"]))
    parts = [config.get("os", ""), config.get("architecture", "")]
    if config.get("variant"):
        parts.append(config["variant"])
    return "/".join(parts)


def extract(archive: tarfile.TarFile, path: str) -> bytes:
    wanted = path.lstrip("/")
    for layer in reversed(manifest(archive)["layers"]):  # the top layer wins
        if "zstd" in layer.get("mediaType", ""):
            raise SystemExit(f"oci-archive: zstd layers are not supported ({layer['digest']})")
        with tarfile.open(fileobj=blob(archive, layer["digest"]), mode="r|*") as files:
            for member in files:
                if member.name.lstrip("./") == wanted and member.isfile():
                    data = files.extractfile(member)
                    assert data is not None
                    return data.read()
    raise SystemExit(f"oci-archive: {path} is not in the image")


def main(argv: list[str]) -> None:
    if (
        len(argv) < 2
        or argv[0] not in ("platform", "extract")
        or len(argv) != (2 if argv[0] == "platform" else 3)
    ):
        raise SystemExit(__doc__)
    with tarfile.open(argv[1]) as archive:
        if argv[0] == "platform":
            print(platform(archive))
        else:
            sys.stdout.buffer.write(extract(archive, argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
