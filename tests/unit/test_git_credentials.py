"""Secret data → credentials, known_hosts matching, callback behaviour and error classes."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time

import pygit2
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from pygit2.enums import CredentialType

from kubescribe.git.transport.callbacks import remote_callbacks
from kubescribe.git.transport.errors import (
    GitFailure,
    InvalidCredentials,
    TransportRefused,
    classify_git_error,
    redact,
)
from kubescribe.git.transport.known_hosts import check_host_key, parse_known_hosts
from kubescribe.git.transport.secret import TOKEN_USERNAME, Credentials
from kubescribe_devenv.pki import CertificateAuthority


def _ed25519() -> tuple[bytes, str, bytes]:
    """(OpenSSH private key, public key line, public key blob)."""
    key = ed25519.Ed25519PrivateKey.generate()
    line = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    return private, line.decode(), base64.b64decode(line.split()[1])


def _hashed(name: str) -> str:
    salt = os.urandom(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


# --- Secret data -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ssh-privatekey", "identity", "sshPrivateKey"])
def test_ssh_key_is_read_from_every_common_key_name(name: str) -> None:
    private, public, _ = _ed25519()
    creds = Credentials.from_secret_data({name: private})
    assert creds.ssh_key is not None
    assert creds.ssh_key.public_line == public
    assert creds.ssh_key.fingerprint.startswith("SHA256:")


def test_same_key_under_two_names_is_fine_different_keys_are_not() -> None:
    private, _, _ = _ed25519()
    Credentials.from_secret_data({"identity": private, "ssh-privatekey": private})
    with pytest.raises(InvalidCredentials, match="different SSH keys"):
        Credentials.from_secret_data({"identity": private, "ssh-privatekey": _ed25519()[0]})


def test_pem_encrypted_key_opens_with_passphrase_and_never_shows_it() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret-phrase"),
    )
    creds = Credentials.from_secret_data({"ssh-privatekey": pem, "passphrase": b"s3cret-phrase"})
    assert creds.ssh_key is not None
    assert "BEGIN OPENSSH PRIVATE KEY" in creds.ssh_key.private_key
    with pytest.raises(InvalidCredentials, match="needs a passphrase"):
        Credentials.from_secret_data({"ssh-privatekey": pem})
    with pytest.raises(InvalidCredentials, match="does not open") as info:
        Credentials.from_secret_data({"ssh-privatekey": pem, "ssh-passphrase": b"wrong-one"})
    assert "wrong-one" not in str(info.value)


def test_flux_password_is_the_passphrase_of_an_ssh_key() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"flux-pass"),
    )
    creds = Credentials.from_secret_data({"identity": pem, "password": b"flux-pass"})
    assert creds.ssh_key is not None
    assert creds.password is None


def test_garbage_key_is_invalid_without_echoing_it() -> None:
    with pytest.raises(InvalidCredentials) as info:
        Credentials.from_secret_data({"identity": b"-----BEGIN NOTHING-----\nc2VjcmV0\n"})
    assert "c2VjcmV0" not in str(info.value)


def test_https_username_password_token_and_bearer() -> None:
    basic = Credentials.from_secret_data({"username": b"alice", "password": b"pw"})
    assert (basic.username, basic.password) == ("alice", "pw")
    token = Credentials.from_secret_data({"token": b"tok"})
    assert (token.username, token.password) == (TOKEN_USERNAME, "tok")
    named = Credentials.from_secret_data({"username": b"oauth2", "token": b"tok"})
    assert (named.username, named.password) == ("oauth2", "tok")
    bearer = Credentials.from_secret_data({"bearerToken": b"abc"})
    assert bearer.bearer_token == "abc"
    assert bearer.password is None
    with pytest.raises(InvalidCredentials, match="no `username`"):
        Credentials.from_secret_data({"password": b"pw"})
    with pytest.raises(InvalidCredentials, match="both"):
        Credentials.from_secret_data({"username": b"a", "password": b"pw", "token": b"t"})


def test_trailing_newlines_dropped_and_unrelated_keys_ignored() -> None:
    creds = Credentials.from_secret_data(
        {"username": b"alice\n", "password": b"pw\r\n", "keystore.jks": b"\xff\xfe", "url": b"x"}
    )
    assert (creds.username, creds.password) == ("alice", "pw")


def test_secret_values_stay_out_of_repr() -> None:
    private, _, _ = _ed25519()
    creds = Credentials.from_secret_data(
        {"identity": private, "username": b"u", "password": b"pw-value", "bearerToken": b"bt-val"}
    )
    text = repr(creds)
    for value in ("pw-value", "bt-val", "PRIVATE KEY"):
        assert value not in text


def test_ca_bundle_and_known_hosts_override() -> None:
    ca = CertificateAuthority()
    _, public, _ = _ed25519()
    creds = Credentials.from_secret_data(
        {"caFile": ca.cert_pem, "known_hosts": f"a.example {public}".encode()},
        known_hosts=f"b.example {public}",
    )
    assert len(creds.ca_certs) == 1
    assert [h.hosts for h in creds.known_hosts] == ["b.example"]
    with pytest.raises(InvalidCredentials, match=r"ca\.crt"):
        Credentials.from_secret_data({"ca.crt": b"not a certificate"})


# --- known_hosts -------------------------------------------------------------------------


def test_known_hosts_forms() -> None:
    _, public, blob = _ed25519()
    text = "\n".join(
        [
            "# comment",
            "",
            f"git.example,192.0.2.1 {public}",
            f"[git.example]:2222 {public}",
            f"{_hashed('[hashed.example]:2200')} {public}",
            f"*.wild.example,!bad.wild.example {public} comment words",
        ]
    )
    entries = parse_known_hosts(text)
    assert len(entries) == 4

    def accepted(host: str, port: int) -> bool:
        try:
            check_host_key(entries, host, port, blob)
        except TransportRefused:
            return False
        return True

    assert accepted("git.example", 22)
    assert accepted("192.0.2.1", 22)
    assert accepted("git.example", 2222)
    assert not accepted("git.example", 2200)
    assert accepted("hashed.example", 2200)
    assert not accepted("hashed.example", 22)
    assert accepted("a.wild.example", 22)
    assert not accepted("bad.wild.example", 22)
    assert not accepted("other.example", 22)


@pytest.mark.parametrize(
    "line", ["host-only", "host ssh-ed25519", "host ssh-ed25519 !!!", "@weird host x y"]
)
def test_broken_known_hosts_line_is_an_error(line: str) -> None:
    with pytest.raises(InvalidCredentials, match="line 1"):
        parse_known_hosts(line)


@pytest.mark.timeout(20)
def test_a_hostile_host_pattern_matches_in_linear_time() -> None:
    _, public, _ = _ed25519()
    [entry] = parse_known_hosts(f"{'*a' * 12}b {public}")  # from a Secret a tenant writes
    started = time.perf_counter()
    assert not entry.matches("a" * 250)
    assert time.perf_counter() - started < 0.1


def test_key_type_must_match_the_blob() -> None:
    _, public, _ = _ed25519()
    with pytest.raises(InvalidCredentials):
        parse_known_hosts("host ssh-rsa " + public.split()[1])


def test_host_key_unknown_mismatch_other_type_and_revoked() -> None:
    _, known_public, _ = _ed25519()
    _, _, presented = _ed25519()
    rsa_line = (
        "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDBj8aSNgO4Vmz4ZyvaU1rEP5UGmY2pgC2lkqS3ep0F"
        "TSqnTYrT7kvp2aBBvdqeUnH0gtvYb1mxOoF8j9xHlqIx0fSGZkYtbDqeHg/Bzq+ryNHtd9uWBAQUUoAyop"
        "fZs9yqr7aTWlwOqzUDJDYw6/ULfvNcmOQHWmS2M5PVVHCzDQ=="
    )
    cases = {
        "": GitFailure.HOST_KEY_UNKNOWN,
        f"h.example {known_public}": GitFailure.HOST_KEY_MISMATCH,
        f"h.example {rsa_line}": GitFailure.HOST_KEY_UNKNOWN,
        f"@revoked h.example ssh-ed25519 {base64.b64encode(presented).decode()}\n"
        f"h.example ssh-ed25519 {base64.b64encode(presented).decode()}": (
            GitFailure.HOST_KEY_MISMATCH
        ),
        f"@cert-authority h.example ssh-ed25519 {base64.b64encode(presented).decode()}": (
            GitFailure.HOST_KEY_UNKNOWN
        ),
    }
    for text, reason in cases.items():
        with pytest.raises(TransportRefused) as info:
            check_host_key(parse_known_hosts(text), "h.example", 22, presented)
        assert info.value.reason is reason, text


# --- callbacks ---------------------------------------------------------------------------


def test_a_refused_credential_is_not_offered_again() -> None:
    creds = Credentials.from_secret_data({"username": b"bot-7f3a", "password": b"pw"})
    callbacks = remote_callbacks(creds, "https://git.example/r.git")
    first = callbacks.credentials(
        "https://git.example/r.git", None, CredentialType.USERPASS_PLAINTEXT
    )
    assert isinstance(first, pygit2.UserPass)
    with pytest.raises(TransportRefused) as info:
        callbacks.credentials("https://git.example/r.git", None, CredentialType.USERPASS_PLAINTEXT)
    assert info.value.reason is GitFailure.AUTHENTICATION_FAILED
    assert "pw" not in str(info.value)
    assert "bot-7f3a" not in str(info.value)  # not even the Secret's username reaches status


def test_a_refused_ssh_key_never_names_the_secrets_username() -> None:
    private, _, _ = _ed25519()
    creds = Credentials.from_secret_data({"identity": private, "username": b"bot-7f3a"})
    callbacks = remote_callbacks(creds, "ssh://git.example/r.git")
    callbacks.credentials("ssh://git.example/r.git", None, CredentialType.SSH_MEMORY)
    with pytest.raises(TransportRefused) as info:
        callbacks.credentials("ssh://git.example/r.git", None, CredentialType.SSH_MEMORY)
    assert "bot-7f3a" not in str(info.value)


def test_ssh_username_comes_from_the_url_or_defaults_to_git() -> None:
    private, _, _ = _ed25519()
    creds = Credentials.from_secret_data({"identity": private})
    callbacks = remote_callbacks(creds, "ssh://git.example/r.git")
    user = callbacks.credentials("ssh://git.example/r.git", None, CredentialType.USERNAME)
    assert isinstance(user, pygit2.Username)
    assert user.credential_tuple == ("git",)
    key = callbacks.credentials("ssh://git.example/r.git", "deploy", CredentialType.SSH_MEMORY)
    assert isinstance(key, pygit2.KeypairFromMemory)
    assert key.credential_tuple[0] == "deploy"


def test_ssh_without_a_key_is_authentication_failed() -> None:
    callbacks = remote_callbacks(Credentials(), "git@git.example:org/r.git")
    with pytest.raises(TransportRefused, match="has none"):
        callbacks.credentials("git@git.example:org/r.git", "git", CredentialType.SSH_KEY)


def test_bearer_header_only_over_https() -> None:
    creds = Credentials.from_secret_data({"bearerToken": b"tok"})
    assert remote_callbacks(creds, "https://h/r.git").custom_headers() == [
        "Authorization: Bearer tok"
    ]
    assert remote_callbacks(creds, "http://h/r.git").custom_headers() is None


def test_certificate_check_outside_libgit2_fails_closed() -> None:
    callbacks = remote_callbacks(Credentials(), "ssh://h/r.git")
    with pytest.raises(TransportRefused):
        callbacks.certificate_check(None, True, b"h")


# --- classification ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("unexpected http status code: 401", GitFailure.AUTHENTICATION_FAILED),
        ("too many redirects or authentication replays", GitFailure.AUTHENTICATION_FAILED),
        ("Failed to authenticate SSH session: Unable to send userauth-publickey request",
         GitFailure.AUTHENTICATION_FAILED),
        ("unexpected http status code: 403", GitFailure.PERMISSION_DENIED),
        ("ERROR: The key you are authenticating with has been marked as read only.",
         GitFailure.PERMISSION_DENIED),
        ("remote: Permission to org/repo.git denied to bot.", GitFailure.PERMISSION_DENIED),
        ("GitLab: You are not allowed to push code to this project.", GitFailure.PERMISSION_DENIED),
        ("Gitea: User permission denied for writing.", GitFailure.PERMISSION_DENIED),
        ("TF401027: You need the Git 'GenericContribute' permission to perform this action.",
         GitFailure.PERMISSION_DENIED),
        ("push rejected: refs/heads/main: protected branch hook declined",
         GitFailure.PERMISSION_DENIED),
        ("unexpected http status code: 404", GitFailure.REPOSITORY_NOT_FOUND),
        ("ERROR: Repository not found.", GitFailure.REPOSITORY_NOT_FOUND),
        ("fatal: '/x.git' does not appear to be a git repository", GitFailure.REPOSITORY_NOT_FOUND),
        ("failed to connect to 127.0.0.1: Connection refused", GitFailure.REMOTE_UNREACHABLE),
        ("failed to resolve address for git.example: Name or service not known",
         GitFailure.REMOTE_UNREACHABLE),
        ("invalid or unknown remote ssh hostkey", GitFailure.HOST_KEY_UNKNOWN),
        ("the SSL certificate is invalid", GitFailure.CERTIFICATE_UNTRUSTED),
        ("something else entirely", GitFailure.TRANSFER_FAILED),
    ],
)  # fmt: skip
def test_libgit2_and_server_messages_are_classified(message: str, reason: GitFailure) -> None:
    assert classify_git_error(pygit2.GitError(message)) == (reason, message)


class _RemoteUnavailable(Exception):
    """Stands in for the repository layer's wrapper, raised `from None` around GitError."""


def test_reason_survives_a_wrapper_raised_from_none() -> None:
    def wrapped() -> None:
        try:
            raise TransportRefused(GitFailure.HOST_KEY_MISMATCH, "host key mismatch for h")
        except pygit2.GitError as exc:
            raise _RemoteUnavailable(f"push failed: {exc}") from None

    with pytest.raises(_RemoteUnavailable) as info:
        wrapped()
    assert classify_git_error(info.value) == (
        GitFailure.HOST_KEY_MISMATCH,
        "push failed: host key mismatch for h",
    )


def test_messages_are_redacted() -> None:
    creds = Credentials.from_secret_data({"username": b"u", "password": b"hunter2-pass"})
    message = (
        "failed https://u:hunter2-pass@h/r.git with Authorization: Bearer "
        "abcdefghijklmnopqrstuvwxyz0123 and ghp_0123456789abcdefghijABCDEFGHIJ"
    )
    safe = redact(message, creds)
    for secret in ("hunter2-pass", "abcdefghijklmnopqrstuvwxyz0123", "ghp_0123456789"):
        assert secret not in safe
    reason, text = classify_git_error(pygit2.GitError(message), creds)
    assert "hunter2-pass" not in text
    assert reason is GitFailure.TRANSFER_FAILED
