#!/usr/bin/env python3
"""Write an OCI image layout archive (one tar: oci-layout, index.json, blobs) from layer tars.

    mkoci.py OUT.tar NAME LAYER.tar... [--entrypoint JSON] [--cmd JSON] [--env K=V]... [--arch A]

NAME is the reference containerd records on `ctr images import` (annotation
io.containerd.image.name), e.g. localhost/kubescribe/pause:local. Layers are stored
uncompressed, so each layer's digest is its diff_id. Stdlib only; output is deterministic.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile
from pathlib import Path


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("name")
    ap.add_argument("layers", nargs="+", type=Path)
    ap.add_argument("--entrypoint")
    ap.add_argument("--cmd")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--arch", default="amd64", help="the image's architecture (GOARCH names)")
    a = ap.parse_args()

    layers = [(layer, _digest(layer), layer.stat().st_size) for layer in a.layers]
    cfg: dict[str, object] = {
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *a.env]
    }
    if a.entrypoint:
        cfg["Entrypoint"] = json.loads(a.entrypoint)
    if a.cmd:
        cfg["Cmd"] = json.loads(a.cmd)
    # arm64 images name their variant (v8): builders that pick by platform compare it
    variant = {"variant": "v8"} if a.arch == "arm64" else {}
    config = json.dumps(
        {
            "architecture": a.arch,
            **variant,
            "os": "linux",
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for _, d, _ in layers]},
            # one entry per layer: builders that stack layers on this image (buildah) check it
            "history": [{"created_by": f"mkoci.py {p.name}"} for p, _, _ in layers],
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": f"sha256:{hashlib.sha256(config).hexdigest()}",
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": f"sha256:{d}",
                    "size": s,
                }
                for _, d, s in layers
            ],
        },
        sort_keys=True,
    ).encode()
    manifest_digest = hashlib.sha256(manifest).hexdigest()
    tag = a.name.rsplit(":", 1)[1] if ":" in a.name.rsplit("/", 1)[-1] else "latest"
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": f"sha256:{manifest_digest}",
                    "size": len(manifest),
                    "platform": {"architecture": a.arch, "os": "linux", **variant},
                    "annotations": {
                        "io.containerd.image.name": a.name,
                        "org.opencontainers.image.ref.name": tag,
                    },
                }
            ],
        },
        sort_keys=True,
    ).encode()
    with tarfile.open(a.out, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        _add_bytes(tar, "index.json", index)
        for data in (config, manifest):
            _add_bytes(tar, f"blobs/sha256/{hashlib.sha256(data).hexdigest()}", data)
        for path, digest, size in layers:
            info = tarfile.TarInfo(f"blobs/sha256/{digest}")
            info.size = size
            with path.open("rb") as f:
                tar.addfile(info, f)
    print(f"{a.out} sha256:{manifest_digest}")


if __name__ == "__main__":
    main()
