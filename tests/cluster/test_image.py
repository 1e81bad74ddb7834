"""The image carries its version, licence and source as OCI labels, and an SBOM of the locked
dependencies (CycloneDX, generated from uv.lock at build time). It holds no shell, no package
manager and no pip, runs as 65532, and its arm64 build runs `kubescribe version` under
emulation (qemu-user-static). `--kustomize` builds kustomize in."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

import kubescribe
from kubescribe_devenv.cluster import ClusterTools
from kubescribe_devenv.controlplane import REPO_ROOT
from tests.cluster.conftest import Image, record

# Names no file of the image may have: shells, package managers, pip.
FORBIDDEN = {
    "sh", "bash", "dash", "ash", "zsh", "busybox", "apt", "apt-get", "dpkg", "dpkg-deb",
    "pip", "pip3", "pip3.11", "ensurepip",
    "kubescribe_devenv", "devenv",  # the test bench is not shipped
}  # fmt: skip
ELF_MACHINES = {"amd64": 62, "arm64": 183}
# The environment a process of the image starts with (the image's own, not the machine's).
IMAGE_ENV = {"PATH": "/opt/kubescribe/bin:/usr/local/bin:/usr/bin", "HOME": "/nonexistent"}


def _chroot() -> str:
    chroot = shutil.which("chroot")
    assert chroot is not None, "chroot (coreutils) is missing"
    return chroot


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
    # an optional dependency (the extra kubeconfig-plugins) is not in the image
    assert "kubernetes-asyncio" not in names


def _blob_named(archive: tarfile.TarFile, name: str) -> bytes:
    member = archive.extractfile(name)
    assert member is not None
    return member.read()


def _unpack(archive: Path, dest: Path) -> tuple[dict[str, Any], Path]:
    """The image's configuration, and its file system unpacked under dest/root."""
    layout = dest / "layout"
    root = dest / "root"
    layout.mkdir()
    root.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(layout)], check=True)
    index = json.loads((layout / "index.json").read_text())

    def blob(digest: str) -> Path:
        return layout / "blobs" / "sha256" / digest.split(":", 1)[1]

    manifest = json.loads(blob(index["manifests"][0]["digest"]).read_text())
    config: dict[str, Any] = json.loads(blob(manifest["config"]["digest"]).read_text())
    for layer in manifest["layers"]:
        subprocess.run(["tar", "-xf", str(blob(layer["digest"])), "-C", str(root)], check=True)
    return config, root


def _check_hardened(config: dict[str, Any], root: Path, arch: str) -> int:
    """Asserts what the image must not carry and who it runs as; its unpacked size in bytes."""
    assert config["architecture"] == arch
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Entrypoint"] == ["kubescribe", "run"]
    found = [
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.name in FORBIDDEN or (path.name.startswith("pip-") and path.suffix == ".dist-info")
    ]
    assert found == [], f"the image carries {found}"
    assert not (root / "var/lib/dpkg").exists()
    assert "nonroot:x:65532:65532:" in (root / "etc/passwd").read_text()
    assert (root / "etc/ssl/certs/ca-certificates.crt").stat().st_size > 100_000
    assert (root / "tmp").stat().st_mode & 0o1777 == 0o1777
    python = (root / "usr/bin/python3.11").read_bytes()[:20]
    assert python[:4] == b"\x7fELF"
    assert int.from_bytes(python[18:20], "little") == ELF_MACHINES[arch]
    seen: set[int] = set()
    size = 0
    for path in root.rglob("*"):
        st = path.lstat()
        if st.st_ino not in seen:
            seen.add(st.st_ino)
            size += st.st_size
    return size


def test_the_image_has_no_shell_runs_as_65532_and_starts(image: Image, tmp_path: Path) -> None:
    config, root = _unpack(image.archive, tmp_path)
    size = _check_hardened(config, root, "amd64")
    record("image unpacked MB (amd64)", size / 1e6)
    record("image archive MB (amd64)", image.archive.stat().st_size / 1e6)
    # The entry point's interpreter line is all it needs: no shell runs it.
    done = subprocess.run(
        [
            _chroot(),
            "--userspec=65532:65532",
            str(root),
            "/opt/kubescribe/bin/kubescribe",
            "version",
        ],
        capture_output=True,
        text=True,
        check=False,
        env=IMAGE_ENV,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"kubescribe {kubescribe.__version__}"


@pytest.fixture(scope="session")
def image_arm64(tools: ClusterTools) -> Image:
    """The arm64 image, built by the documented command (cached)."""
    t0 = time.monotonic()
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "build-image.sh"), "--arch", "arm64"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "KUBESCRIBE_CLUSTER_DIR": str(tools.root)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 1, f"stdout is one line, not {lines}"
    archive, ref = lines[0].split()
    assert ref.endswith("-arm64")
    record("image build arm64 (cached when unchanged)", time.monotonic() - t0)
    return Image(Path(archive), ref)


def test_the_arm64_image_runs_under_emulation(image_arm64: Image, tmp_path: Path) -> None:
    qemu = shutil.which("qemu-aarch64-static")
    if qemu is None:
        message = "qemu-aarch64-static is not installed (Debian qemu-user-static)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    config, root = _unpack(image_arm64.archive, tmp_path)
    size = _check_hardened(config, root, "arm64")
    record("image unpacked MB (arm64)", size / 1e6)
    record("image archive MB (arm64)", image_arm64.archive.stat().st_size / 1e6)
    # qemu-user runs ELF files, not scripts: the entry point's interpreter, as the kernel
    # would from its first line; in a chroot, so that nothing of the machine fills a gap.
    shutil.copy(qemu, root / "qemu-aarch64-static")
    script = (root / "opt/kubescribe/bin/kubescribe").read_text().splitlines()[0]
    assert script == "#!/opt/kubescribe/bin/python"
    done = subprocess.run(
        [
            _chroot(),
            "--userspec=65532:65532",
            str(root),
            "/qemu-aarch64-static",
            "/opt/kubescribe/bin/python",
            "-m",
            "kubescribe",
            "version",
        ],
        capture_output=True,
        text=True,
        check=False,
        env=IMAGE_ENV,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"kubescribe {kubescribe.__version__}"


def test_kustomize_can_be_built_into_the_image(tools: ClusterTools, tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "build-image.sh"), "--kustomize"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "KUBESCRIBE_CLUSTER_DIR": str(tools.root)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    archive, _ = done.stdout.split()
    config, root = _unpack(Path(archive), tmp_path)
    _check_hardened(config, root, "amd64")
    # on the image's PATH, where the operator looks without a flag; it runs as 65532
    ran = subprocess.run(
        [_chroot(), "--userspec=65532:65532", str(root), "/usr/local/bin/kustomize", "version"],
        capture_output=True,
        text=True,
        check=False,
        env=IMAGE_ENV,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().startswith("v5.")
