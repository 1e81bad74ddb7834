"""SSH-signed commits verify with the real `git verify-commit` and `ssh-keygen -Y verify`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest

from kubescribe.git.signing import SigningKey

pytestmark = pytest.mark.skipif(
    shutil.which("ssh-keygen") is None or shutil.which("git") is None,
    reason="needs ssh-keygen (Debian package openssh-client) and git",
)

PRINCIPAL = "kubescribe@example.invalid"


def _signed_commit(
    tmp_path: Path, key: SigningKey, message: str = "Add a.yaml\n"
) -> tuple[pygit2.Repository, pygit2.Oid]:
    repo = pygit2.init_repository(str(tmp_path / "repo.git"), bare=True)
    builder = repo.TreeBuilder()
    builder.insert("a.yaml", repo.create_blob(b"kind: ConfigMap\n"), pygit2.enums.FileMode.BLOB)
    who = pygit2.Signature("Kube Scribe", PRINCIPAL, 1_700_000_000, 60)
    oid = key.sign_commit(repo, who, who, message, builder.write(), [])
    repo.references.create("refs/heads/main", oid)
    return repo, oid


def _split_commit(raw: bytes) -> tuple[bytes, bytes]:
    """(signature, signed payload) of a commit object, parsed the way git does."""
    head, _, body = raw.partition(b"\n\n")
    lines, signature, payload = head.split(b"\n"), [], []
    in_sig = False
    for line in lines:
        if line.startswith(b"gpgsig "):
            in_sig = True
            signature.append(line[len(b"gpgsig ") :])
        elif in_sig and line.startswith(b" "):
            signature.append(line[1:])
        else:
            in_sig = False
            payload.append(line)
    return b"\n".join(signature) + b"\n", b"\n".join(payload) + b"\n\n" + body


def _allowed_signers(tmp_path: Path, key: SigningKey) -> Path:
    path = tmp_path / "allowed_signers"
    path.write_text(key.allowed_signers_line(PRINCIPAL) + "\n")
    return path


def test_git_verify_commit_accepts_the_signature(tmp_path: Path) -> None:
    key = SigningKey.generate()
    repo, oid = _signed_commit(tmp_path, key, "Update ConfigMap ünïcode\n\nbody\n")
    done = subprocess.run(
        [
            "git", "-C", repo.path,
            "-c", "gpg.format=ssh",
            "-c", f"gpg.ssh.allowedSignersFile={_allowed_signers(tmp_path, key)}",
            "verify-commit", "--raw", str(oid),
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f'Good "git" signature for {PRINCIPAL}' in done.stderr
    assert key.fingerprint in done.stderr


def test_ssh_keygen_verifies_signature_extracted_from_the_commit(tmp_path: Path) -> None:
    key = SigningKey.generate()
    repo, oid = _signed_commit(tmp_path, key)
    signature, payload = _split_commit(repo[oid].read_raw())
    commit = repo[oid]
    assert isinstance(commit, pygit2.Commit)
    libgit2_signature, libgit2_payload = commit.gpg_signature
    assert payload == libgit2_payload
    assert signature.strip() == libgit2_signature.strip()
    (tmp_path / "commit.sig").write_bytes(signature)
    verify = [
        "ssh-keygen", "-Y", "verify", "-f", str(_allowed_signers(tmp_path, key)),
        "-I", PRINCIPAL, "-n", "git", "-s", str(tmp_path / "commit.sig"),
    ]  # fmt: skip
    good = subprocess.run(verify, input=payload, capture_output=True, check=False)
    assert good.returncode == 0, good.stderr
    tampered = subprocess.run(
        verify, input=payload.replace(b"Add", b"Del"), capture_output=True, check=False
    )
    assert tampered.returncode != 0
    other_namespace = subprocess.run(
        [*verify[:7], "file", *verify[8:]], input=payload, capture_output=True, check=False
    )
    assert other_namespace.returncode != 0


def test_commit_layout_matches_git_and_signing_is_deterministic(tmp_path: Path) -> None:
    key = SigningKey.generate()
    repo, oid = _signed_commit(tmp_path, key)
    raw = repo[oid].read_raw()
    assert b"-----END SSH SIGNATURE-----\n\nAdd a.yaml\n" in raw
    assert b"\n \n" not in raw
    again, same = _signed_commit(tmp_path / "again", key)
    assert same == oid
    assert again[same].read_raw() == raw


def test_keys_round_trip_with_ssh_keygen(tmp_path: Path) -> None:
    path = tmp_path / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "x", "-f", str(path)], check=True
    )
    loaded = SigningKey.from_openssh(path.read_text())
    assert loaded.public_key_line.split()[:2] == path.with_suffix(".pub").read_text().split()[:2]

    generated = SigningKey.generate()
    exported = tmp_path / "generated"
    exported.write_text(generated.private_openssh())
    exported.chmod(0o600)
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(exported)], capture_output=True, text=True, check=True
    ).stdout
    assert derived.split()[:2] == generated.public_key_line.split()[:2]
    assert generated.public_key_line.endswith(" kubescribe")
    assert SigningKey.from_openssh(generated.private_openssh()).fingerprint == (
        generated.fingerprint
    )


def test_sign_matches_ssh_keygen_sign_format(tmp_path: Path) -> None:
    key = SigningKey.generate()
    data = b"arbitrary payload\n"
    (tmp_path / "data.sig").write_text(key.sign(data, namespace="file"))
    done = subprocess.run(
        [
            "ssh-keygen", "-Y", "check-novalidate", "-n", "file",
            "-s", str(tmp_path / "data.sig"),
        ],
        input=data, capture_output=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_only_ed25519_keys_sign(tmp_path: Path) -> None:
    path = tmp_path / "id_ecdsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(path)], check=True)
    with pytest.raises(ValueError, match="ed25519"):
        SigningKey.from_openssh(path.read_bytes())
