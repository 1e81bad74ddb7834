"""Repository URL policy: allowed schemes, no credentials, no link-local or metadata hosts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from kubescribe import app, cli, stopping
from kubescribe.git.urlpolicy import UrlRefusal, UrlRefused, check_transfer, check_url
from kubescribe.net.addresses import NetworkPolicy, network_policy, set_network_policy


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
        ("git@x@169.254.169.254:org/repo.git", UrlRefusal.MALFORMED),  # ssh's host: last @
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


@pytest.mark.parametrize(
    "host",
    [
        "[::a9fe:a9fe]",  # IPv4-compatible
        "[::169.254.169.254]",
        "[::ffff:a9fe:a9fe]",  # IPv4-mapped
        "[64:ff9b::a9fe:a9fe]",  # NAT64 well-known prefix
        "[64:ff9b::169.254.169.254]",
        "[64:ff9b:1:a9fe:a9:fe00::]",  # NAT64 local-use /48 (RFC 6052 layout)
        "[2002:a9fe:a9fe::1]",  # 6to4
        "[64:ff9b::a9fe:1]",  # link-local, not only the metadata address
        "[::ffff:100.100.100.200]",  # Alibaba metadata
    ],
)
def test_link_local_and_metadata_inside_ipv6_are_refused(host: str) -> None:
    with pytest.raises(UrlRefused) as info:
        check_url(f"https://{host}/repo.git", allow_file=False)
    assert info.value.reason is UrlRefusal.ADDRESS_NOT_ALLOWED


def test_resolved_ipv6_forms_are_refused_too() -> None:
    with pytest.raises(UrlRefused, match="metadata"):
        check_url(
            "https://rebound.example/repo.git",
            allow_file=False,
            resolve=lambda _: ["2001:db8::1", "64:ff9b::a9fe:a9fe"],
        )


@pytest.fixture
def deny_private() -> Iterator[None]:
    set_network_policy(NetworkPolicy(deny_private=True))
    yield
    set_network_policy(NetworkPolicy())


PRIVATE = [
    "https://10.0.0.5/repo.git",
    "https://172.20.1.1/repo.git",
    "https://192.168.1.10/repo.git",
    "https://127.0.0.1:8443/repo.git",
    "https://100.64.0.1/repo.git",
    "https://[::1]/repo.git",
    "https://[fd12:3456::1]/repo.git",
    "https://[::ffff:10.0.0.5]/repo.git",
    "https://[64:ff9b::a00:5]/repo.git",
    "https://0.0.0.0/repo.git",
    "ssh://git@gitea.git.svc.cluster.local/repo.git",
    "git@gitea.git.svc:org/repo.git",
    "https://localhost/repo.git",
    "https://gitea/repo.git",
    "https://nas.local/repo.git",
]


@pytest.mark.parametrize("url", PRIVATE)
def test_private_networks_are_allowed_by_default(url: str) -> None:
    check_url(url, allow_file=False)


@pytest.mark.usefixtures("deny_private")
@pytest.mark.parametrize("url", PRIVATE)
def test_deny_private_networks_refuses_private_addresses_and_cluster_names(url: str) -> None:
    with pytest.raises(UrlRefused) as info:
        check_url(url, allow_file=False)
    assert info.value.reason is UrlRefusal.ADDRESS_NOT_ALLOWED
    assert "--deny-private-networks" in info.value.message


@pytest.mark.usefixtures("deny_private")
def test_deny_private_networks_checks_what_a_name_resolves_to() -> None:
    check_url("https://github.com/org/repo.git", allow_file=False, resolve=lambda _: ["140.82.1.1"])
    check_url("https://v6.example/repo.git", allow_file=False, resolve=lambda _: ["2606:4700::1"])
    with pytest.raises(UrlRefused, match="private"):
        check_url("https://git.example/r.git", allow_file=False, resolve=lambda _: ["10.1.2.3"])
    check_url("file:///srv/repo.git", allow_file=True)  # local paths have their own flag


def test_every_transfer_checks_the_address_the_name_resolves_to_now() -> None:
    answers = iter([["203.0.113.7"], ["169.254.169.254"]])
    check_transfer("https://git.example/repo.git", resolve=lambda _: next(answers))
    with pytest.raises(UrlRefused, match="metadata"):
        check_transfer("https://git.example/repo.git", resolve=lambda _: next(answers))
    check_transfer("/srv/git/repo.git", resolve=lambda _: pytest.fail("no host to resolve"))


@pytest.mark.parametrize(("args", "denied"), [([], False), (["--deny-private-networks"], True)])
def test_run_sets_the_network_policy_from_its_flag(
    monkeypatch: pytest.MonkeyPatch, args: list[str], denied: bool
) -> None:
    """`kubescribe run` applies the flag before the operator starts (which is stubbed here)."""
    seen: list[bool] = []

    async def run_operator(*_: object, **__: object) -> None:
        seen.append(network_policy().deny_private)

    async def reach_api_server(*_: object) -> None:
        pass

    monkeypatch.setattr(app, "run_operator", run_operator)  # `run` imports it when it runs
    monkeypatch.setattr(cli, "_reach_api_server", reach_api_server)  # no API server here
    ended: list[bool] = []  # after a clean stop, `run` exits the process (not here)
    monkeypatch.setattr(stopping.Stopper, "end", lambda _: ended.append(True))
    try:
        result = CliRunner().invoke(cli.main, ["run", *args])
    finally:
        set_network_policy(NetworkPolicy())
    assert result.exit_code == 0, result.output
    assert seen == [denied]
    assert ended == [True]
