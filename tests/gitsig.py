"""Check SSH commit signatures with the real tools: git verify-commit, ssh-keygen -Y verify."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kubescribe_devenv.gitremote import git

PRINCIPAL = "kubescribe"


def allowed_signers(path: Path, public_key_line: str) -> Path:
    """An allowed signers file trusting `public_key_line` (`ssh-ed25519 AAAA... [comment]`)."""
    path.write_text(f'{PRINCIPAL} namespaces="git" {public_key_line.strip()}\n')
    return path


def git_verify_commit(repo: Path, sha: str, signers: Path) -> str:
    """`git verify-commit` with `gpg.format=ssh`; returns its report, fails unless good."""
    done = subprocess.run(
        [
            "git",
            "-c",
            "gpg.format=ssh",
            "-c",
            f"gpg.ssh.allowedSignersFile={signers}",
            "verify-commit",
            sha,
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{sha}: {done.stderr}"
    assert 'Good "git" signature' in done.stderr, done.stderr
    return done.stderr


def ssh_keygen_verify(repo: Path, sha: str, signers: Path, scratch: Path) -> str:
    """Split a commit into its signed payload and `gpgsig` header, and verify the signature
    with `ssh-keygen -Y verify -n git`; returns its report, fails unless good."""
    raw = git("cat-file", "commit", sha, cwd=repo)
    header, _, body = raw.partition("\n\n")
    payload: list[str] = []
    signature: list[str] = []
    in_signature = False
    for line in header.split("\n"):
        if line.startswith("gpgsig "):
            in_signature = True
            signature.append(line.removeprefix("gpgsig "))
        elif in_signature and line.startswith(" "):
            signature.append(line[1:])
        else:
            in_signature = False
            payload.append(line)
    assert signature, f"{sha} is not signed"
    scratch.mkdir(parents=True, exist_ok=True)
    sig_file = scratch / f"{sha}.sig"
    sig_file.write_text("\n".join(signature) + "\n")
    done = subprocess.run(
        [
            "ssh-keygen",
            "-Y",
            "verify",
            "-f",
            str(signers),
            "-I",
            PRINCIPAL,
            "-n",
            "git",
            "-s",
            str(sig_file),
        ],
        input=("\n".join(payload) + "\n\n" + body).encode(),
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, f"{sha}: {done.stderr.decode()}"
    return done.stdout.decode()
