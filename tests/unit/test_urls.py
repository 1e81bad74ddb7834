"""The one grammar of repository URLs (`kubescribe.net.urls`) and the address policy
(`kubescribe.net.addresses`): the scp-like form with a bracketed IPv6 host, user names, ports,
and the key two spellings of one repository share."""

from __future__ import annotations

import contextlib
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubescribe.git.transport.callbacks import _endpoint
from kubescribe.git.urlpolicy import check_url
from kubescribe.net.addresses import NetworkPolicy, literal_address, refusal
from kubescribe.net.urls import Form, RemoteUrl, UrlSyntaxError, normalize, parse


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
        ("git+ssh://git@github.com/org/repo.git", "ssh://git@github.com/org/repo"),
        ("ssh://git:secret@host:2222/org/repo", "ssh://git@host:2222/org/repo"),
        ("file:///srv/git/repo.git", "file:///srv/git/repo"),
        ("/srv/git/repo.git/", "file:///srv/git/repo"),
        ("git@[2001:db8::1]:org/repo.git", "ssh://git@[2001:db8::1]/org/repo"),
        ("[2001:DB8::1]:org/repo.git", "ssh://[2001:db8::1]/org/repo"),
        ("ssh://git@[2001:db8::1]:22/org/repo.git", "ssh://git@[2001:db8::1]/org/repo"),
        ("ssh://git@[2001:db8::1]:2222/org/repo", "ssh://git@[2001:db8::1]:2222/org/repo"),
        ("gitea.internal:org/repo.git", "ssh://gitea.internal/org/repo"),
    ],
)
def test_normalize(url: str, expected: str) -> None:
    assert normalize(url) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "git@[2001:db8::1]:org/repo.git",
            RemoteUrl(Form.SCP, "ssh", "2001:db8::1", user="git", path="org/repo.git"),
        ),
        ("host:repo", RemoteUrl(Form.SCP, "ssh", "host", path="repo")),
        (
            "git:pw@host:repo",
            RemoteUrl(Form.SCP, "ssh", "git", password=True, path="pw@host:repo"),
        ),
        (
            "ssh://git@[::1]:2222/r",
            RemoteUrl(Form.URL, "ssh", "::1", 2222, "git", path="/r"),
        ),
        ("./repo", RemoteUrl(Form.LOCAL, "file", path="./repo")),
        ("repo", RemoteUrl(Form.LOCAL, "file", path="repo")),
        ("ext::sh -c x", RemoteUrl(Form.HELPER, "ext", path="sh -c x")),
    ],
)
def test_parse(url: str, expected: RemoteUrl) -> None:
    assert parse(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "git@[not-an-address]:repo",
        "[]:repo",
        "https://[evil.example]/r",
        "https://h:99999/r",
        "a@b@169.254.169.254:repo",
    ],
)
def test_what_does_not_parse_is_a_syntax_error(url: str) -> None:
    with pytest.raises(UrlSyntaxError):
        parse(url)


def test_the_ipv6_scp_form_passes_the_policy_and_has_a_key() -> None:
    """The spec that stopped every replica: it passed the URL policy, then the key raised."""
    url = "git@[2001:db8::1]:org/repo.git"
    check_url(url)
    assert normalize(url) == normalize("ssh://git@[2001:db8::1]/org/repo")


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("git@[2001:db8::1]:org/repo.git", ("ssh", "git", "2001:db8::1", 22)),
        ("git@host:org/a@b.git", ("ssh", "git", "host", 22)),
        ("git+ssh://git@Host:2222/r", ("ssh", "git", "host", 2222)),
        ("https://host/r", ("https", None, "host", 443)),
    ],
)
def test_the_transport_checks_the_host_the_policy_checked(
    url: str, endpoint: tuple[str, str | None, str, int]
) -> None:
    """Host keys and certificates are matched against the host of the same grammar."""
    assert _endpoint(url) == endpoint


def test_bracketed_link_local_scp_host_is_refused() -> None:
    with pytest.raises(ValueError, match="link-local"):
        check_url("git@[fe80::1]:org/repo.git")


_HOSTS = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,10}){0,3}", fullmatch=True),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
    st.ip_addresses(v=4).map(str),
)


@given(
    user=st.sampled_from(["", "git@", "org-1@"]),
    host=_HOSTS,
    path=st.from_regex(r"[A-Za-z0-9_.-][A-Za-z0-9_./-]{0,30}", fullmatch=True),
)
def test_scp_form_and_ssh_url_share_one_key(user: str, host: str, path: str) -> None:
    scp = f"{user}{host}:{path}"
    assert normalize(scp) == normalize(f"ssh://{user}{host}/{path}")


@given(st.text(max_size=80))
def test_parse_and_normalize_raise_only_syntax_errors(url: str) -> None:
    with contextlib.suppress(UrlSyntaxError):
        normalize(url)


@pytest.mark.parametrize(
    "spelling",
    ["2852039166", "0xa9.0xfe.0xa9.0xfe", "169.254.43518", "0251.0376.0251.0376", "10.1"],
)
def test_legacy_ipv4_spellings_read_as_the_resolver_reads_them(spelling: str) -> None:
    address = literal_address(spelling)
    assert address is not None
    assert address.packed == socket.inet_aton(spelling)


@pytest.mark.parametrize("name", ["08", "0x", "1..2", "4294967296", "256.1.1.1", "1.2.3.4.5"])
def test_what_the_resolver_does_not_read_as_an_address_is_a_name(name: str) -> None:
    assert literal_address(name) is None


def test_refusal_names_the_rule() -> None:
    assert refusal("169.254.169.254", NetworkPolicy()) == "is a cloud metadata endpoint"
    assert refusal("[fe80::2]", NetworkPolicy()) == "is a link-local address"
    assert refusal("10.0.0.1", NetworkPolicy()) is None
    assert refusal("10.0.0.1", NetworkPolicy(deny_private=True)) is not None
    assert refusal("kubernetes.default.svc", NetworkPolicy(deny_private=True)) is not None
    assert refusal("github.com", NetworkPolicy(deny_private=True)) is None
