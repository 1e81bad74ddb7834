"""Repository URL normalization (the one-writer key) and credential redaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubescribe.git.repo import cache_path, normalize_url, redact


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/org/repo.git", "https://github.com/org/repo"),
        ("HTTPS://GitHub.COM/org/repo/", "https://github.com/org/repo"),
        ("https://user:token@github.com/org/repo.git/", "https://github.com/org/repo"),
        ("https://token@github.com:443/org/repo", "https://github.com/org/repo"),
        ("https://git.example:8443/org/repo", "https://git.example:8443/org/repo"),
        ("git@github.com:org/repo.git", "ssh://git@github.com/org/repo"),
        ("ssh://git@GitHub.com:22/org/repo.git", "ssh://git@github.com/org/repo"),
        ("ssh://git:secret@host:2222/org/repo", "ssh://git@host:2222/org/repo"),
        ("file:///srv/git/repo.git", "file:///srv/git/repo"),
        ("/srv/git/repo.git/", "file:///srv/git/repo"),
    ],
)
def test_normalize_url(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


def test_same_repository_same_cache(tmp_path: Path) -> None:
    a = cache_path(tmp_path, "https://u:p@Example.com/org/repo.git")
    b = cache_path(tmp_path, "https://example.com/org/repo")
    assert a == b
    assert a.parent == tmp_path
    assert a.name.endswith(".git")
    assert len(a.name) == 20
    assert cache_path(tmp_path, "https://example.com/org/other") != a


def test_redact_removes_credentials() -> None:
    url = "https://user:s3cr3t@example.com/org/repo"
    message = f"failed to connect to {url}: s3cr3t rejected"
    cleaned = redact(message, url)
    assert "s3cr3t" not in cleaned
    assert "user" not in cleaned
    assert "https://example.com/org/repo" in cleaned
