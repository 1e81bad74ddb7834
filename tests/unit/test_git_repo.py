"""The cache of a repository (one per normalized URL) and credential redaction."""

from __future__ import annotations

from pathlib import Path

from kubescribe.git.repo import cache_path, redact


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
