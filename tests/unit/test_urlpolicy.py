"""Repository URL policy: allowed schemes, no credentials, no link-local or metadata hosts."""

from __future__ import annotations

import pytest

from kubescribe.git.urlpolicy import UrlRefusal, UrlRefused, check_url


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/org/repo.git",
        "https://gitlab.example.com:8443/group/sub/repo",
        "https://dev.azure.com/org/project/_git/repo",
        "ssh://git@github.com/org/repo.git",
        "ssh://git@gitea.example:2222/org/repo.git",
        "git+ssh://git@host.example/org/repo.git",
        "git@github.com:org/repo.git",
        "org-12345@vs-ssh.visualstudio.com:v3/org/project/repo",
        "gitea.internal:org/repo.git",
        "ssh://git@[2001:db8::1]:22/repo.git",
        "https://10.0.0.5/repo.git",
        "https://127.0.0.1:8443/repo.git",
    ],
)
def test_allowed(url: str) -> None:
    check_url(url, allow_file=False)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://github.com/org/repo.git", UrlRefusal.SCHEME_NOT_ALLOWED),
        ("git://github.com/org/repo.git", UrlRefusal.SCHEME_NOT_ALLOWED),
        ("ftp://host/repo.git", UrlRefusal.SCHEME_NOT_ALLOWED),
        ("ext::sh -c touch% /tmp/pwned", UrlRefusal.MALFORMED),
        ("ext::sh", UrlRefusal.SCHEME_NOT_ALLOWED),
        ("fd::17/foo", UrlRefusal.SCHEME_NOT_ALLOWED),
        ("file:///srv/git/repo.git", UrlRefusal.SCHEME_NOT_ALLOWED),
        ("/srv/git/repo.git", UrlRefusal.SCHEME_NOT_ALLOWED),
        ("./repo.git", UrlRefusal.SCHEME_NOT_ALLOWED),
        ("https://user:ghp_secret@github.com/org/repo.git", UrlRefusal.CREDENTIALS_IN_URL),
        ("https://ghp_secret@github.com/org/repo.git", UrlRefusal.CREDENTIALS_IN_URL),
        ("ssh://git:pw@github.com/org/repo.git", UrlRefusal.CREDENTIALS_IN_URL),
        ("git:pw@github.com:org/repo.git", UrlRefusal.CREDENTIALS_IN_URL),
        ("https://169.254.169.254/latest/meta-data", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("https://169.254.10.1/repo.git", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("ssh://git@[fe80::1]/repo.git", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("ssh://git@[fe80::1%25eth0]/repo.git", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("https://[fd00:ec2::254]/repo.git", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("https://100.100.100.200/repo.git", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("https://metadata.google.internal/computeMetadata/v1/", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("https://METADATA.google.internal./x", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("git@metadata:repo.git", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("https://2852039166/repo.git", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("https://0xa9.0xfe.0xa9.0xfe/repo.git", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("https://169.254.43518/repo.git", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("https://[::ffff:169.254.169.254]/repo.git", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("ssh://-oProxyCommand=touch/repo.git", UrlRefusal.MALFORMED),
        ("git@host:-repo.git", UrlRefusal.MALFORMED),
        ("https://host:99999/repo.git", UrlRefusal.MALFORMED),
        ("https:///repo.git", UrlRefusal.MALFORMED),
        (" https://github.com/org/repo.git", UrlRefusal.MALFORMED),
        ("https://github.com/org/repo.git\n", UrlRefusal.MALFORMED),
        ("", UrlRefusal.MALFORMED),
    ],
)
def test_refused(url: str, reason: UrlRefusal) -> None:
    with pytest.raises(UrlRefused) as info:
        check_url(url, allow_file=False)
    assert info.value.reason is reason
    assert "secret" not in info.value.message
    assert "pw" not in info.value.message


def test_file_and_insecure_schemes_need_their_flags() -> None:
    check_url("file:///srv/git/repo.git", allow_file=True)
    check_url("/srv/git/repo.git", allow_file=True)
    check_url("http://gitea.internal/repo.git", allow_file=False, allow_insecure=True)
    with pytest.raises(UrlRefused):
        check_url("http://169.254.169.254/", allow_file=False, allow_insecure=True)
    with pytest.raises(UrlRefused):
        check_url("http://u:p@gitea.internal/repo.git", allow_file=False, allow_insecure=True)


def test_resolve_hook_checks_resolved_addresses() -> None:
    def resolve(host: str) -> list[str]:
        return {"evil.example": ["203.0.113.7", "169.254.169.254"]}.get(host, ["203.0.113.8"])

    check_url("https://good.example/repo.git", allow_file=False, resolve=resolve)
    with pytest.raises(UrlRefused) as info:
        check_url("https://evil.example/repo.git", allow_file=False, resolve=resolve)
    assert info.value.reason is UrlRefusal.ADDRESS_NOT_ALLOWED
    assert "evil.example" in info.value.message
