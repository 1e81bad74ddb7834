"""A bare Git repository used as a remote over file://, read back with the real `git` CLI."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

_ENV = {
    "GIT_AUTHOR_NAME": "seed",
    "GIT_AUTHOR_EMAIL": "seed@example.invalid",
    "GIT_COMMITTER_NAME": "seed",
    "GIT_COMMITTER_EMAIL": "seed@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(*args: str, cwd: Path | None = None, input: str | None = None) -> str:
    """Run git and return stdout; raise with stderr on failure."""
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        env={**os.environ, **_ENV},
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class BareRemote:
    """A bare repository with one empty seed commit on `branch`."""

    path: Path
    branch: str = "main"

    @classmethod
    def create(cls, path: Path, branch: str = "main") -> BareRemote:
        git("init", "--quiet", "--bare", f"--initial-branch={branch}", str(path))
        tree = git("mktree", cwd=path, input="").strip()
        commit = git("commit-tree", tree, "-m", "Initial commit", cwd=path).strip()
        git("update-ref", f"refs/heads/{branch}", commit, cwd=path)
        return cls(path, branch)

    @property
    def url(self) -> str:
        return self.path.resolve().as_uri()

    def tip(self, branch: str | None = None) -> str | None:
        try:
            return git(
                "rev-parse", "--verify", "--quiet", branch or self.branch, cwd=self.path
            ).strip()
        except RuntimeError:
            return None

    def files(self, branch: str | None = None) -> list[str]:
        """Every file path on the branch tip."""
        out = git("ls-tree", "-r", "--name-only", "-z", branch or self.branch, cwd=self.path)
        return [p for p in out.split("\0") if p]

    def read(self, path: str, branch: str | None = None) -> str:
        return git("show", f"{branch or self.branch}:{path}", cwd=self.path)

    def log(
        self, branch: str | None = None, fmt: str = "%H%x1f%an%x1f%ae%x1f%cn%x1f%ce%x1f%B%x1e"
    ) -> list[dict[str, str]]:
        """Commits newest first, with sha, author/committer name and email, and message."""
        out = git("log", f"--format={fmt}", branch or self.branch, cwd=self.path)
        commits = []
        for raw in out.split("\x1e"):
            record = raw.strip("\n")
            if not record:
                continue
            sha, an, ae, cn, ce, msg = record.split("\x1f")
            commits.append(
                {
                    "sha": sha,
                    "author": an,
                    "author_email": ae,
                    "committer": cn,
                    "committer_email": ce,
                    "message": msg.strip(),
                }
            )
        return commits

    def commit_foreign(
        self, path: str, content: str, message: str, branch: str | None = None
    ) -> str:
        """Push a commit made by someone else: add or replace one file on the branch tip."""
        ref = branch or self.branch
        scratch = self.path.parent / f".{self.path.name}-foreign"
        if not scratch.exists():
            git("clone", "--quiet", str(self.path), str(scratch))
        git("fetch", "--quiet", "origin", ref, cwd=scratch)
        git("checkout", "--quiet", "-B", ref, "FETCH_HEAD", cwd=scratch)
        target = scratch / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        git("add", path, cwd=scratch)
        git("commit", "--quiet", "-m", message, cwd=scratch)
        git("push", "--quiet", "origin", f"HEAD:refs/heads/{ref}", cwd=scratch)
        return git("rev-parse", "HEAD", cwd=scratch).strip()

    def remove_foreign(self, path: str, message: str, branch: str | None = None) -> str:
        """Push a commit made by someone else that removes one file from the branch tip."""
        ref = branch or self.branch
        scratch = self.path.parent / f".{self.path.name}-foreign"
        if not scratch.exists():
            git("clone", "--quiet", str(self.path), str(scratch))
        git("fetch", "--quiet", "origin", ref, cwd=scratch)
        git("checkout", "--quiet", "-B", ref, "FETCH_HEAD", cwd=scratch)
        git("rm", "--quiet", path, cwd=scratch)
        git("commit", "--quiet", "-m", message, cwd=scratch)
        git("push", "--quiet", "origin", f"HEAD:refs/heads/{ref}", cwd=scratch)
        return git("rev-parse", "HEAD", cwd=scratch).strip()
