"""Why a transfer failed, as a stable condition reason and a message that holds no secret."""

from __future__ import annotations

import re
from collections.abc import Iterator
from enum import StrEnum
from typing import Protocol

import pygit2

from kubescribe.api import conditions as c


class GitFailure(StrEnum):
    """Why a fetch or push failed; values are stable condition reasons."""

    AUTHENTICATION_FAILED = c.AUTHENTICATION_FAILED
    HOST_KEY_UNKNOWN = c.HOST_KEY_UNKNOWN
    HOST_KEY_MISMATCH = c.HOST_KEY_MISMATCH
    CERTIFICATE_UNTRUSTED = c.CERTIFICATE_UNTRUSTED
    REMOTE_UNREACHABLE = c.REMOTE_UNREACHABLE
    REPOSITORY_NOT_FOUND = c.REPOSITORY_NOT_FOUND
    PERMISSION_DENIED = c.PERMISSION_DENIED
    REDIRECT_REFUSED = c.REDIRECT_REFUSED
    TRANSFER_FAILED = c.TRANSFER_FAILED


class TransportRefused(pygit2.GitError):
    """Raised by a callback to stop a transfer; the message is safe to show."""

    def __init__(self, reason: GitFailure, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class InvalidCredentials(ValueError):
    """The Secret's data cannot be used; the message names keys, never values."""


class HoldsSecrets(Protocol):
    """What holds values that must never appear in a message (`secret.Credentials`)."""

    def secret_values(self) -> tuple[str, ...]: ...


def text_value(name: str, value: bytes) -> str:
    """A Secret value as text, or `InvalidCredentials` naming the key."""
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise InvalidCredentials(f"Secret key {name!r} is not UTF-8 text") from None


# Matched in order against the lower-cased messages of an exception and its causes.
_PATTERNS: tuple[tuple[GitFailure, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(pattern))
    for reason, pattern in (
        (GitFailure.REDIRECT_REFUSED, r"cannot redirect from"),
        (GitFailure.HOST_KEY_UNKNOWN, r"unknown remote ssh hostkey|host key verification"),
        (
            GitFailure.CERTIFICATE_UNTRUSTED,
            r"certificate|ssl error|tls error|self[- ]signed|unable to get local issuer",
        ),
        (
            GitFailure.PERMISSION_DENIED,
            r"\b403\b|read[- ]only|not allowed to (push|write)|permission to .* denied"
            r"|write access|denied to|tf401027|insufficient permission|push denied"
            r"|user permission denied|hook declined|protected branch",
        ),
        (
            GitFailure.AUTHENTICATION_FAILED,
            r"\b401\b|authenticat|credentials|permission denied \(publickey|userauth"
            r"|too many redirects or authentication replays",
        ),
        (
            GitFailure.REPOSITORY_NOT_FOUND,
            r"\b404\b|not found|does not appear to be a git repository|no such repository"
            r"|does not exist|could not find repository",
        ),
        (
            GitFailure.REMOTE_UNREACHABLE,
            r"failed to connect|connection refused|could not resolve|failed to resolve"
            r"|name or service not known|timed out|unreachable|no route to host"
            r"|connection reset|failed to start ssh session|failed to send request"
            r"|unexpected disconnect|early eof",
        ),
    )
)
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")
_AUTH_HEADER = re.compile(r"(?i)\b(bearer|basic)\s+[a-z0-9._~+/=-]{20,}")
_KNOWN_TOKENS = re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w-]{20,})")
_MAX_MESSAGE = 500


def classify_git_error(
    exc: BaseException, creds: HoldsSecrets | None = None
) -> tuple[GitFailure, str]:
    """The reason a transfer failed and a message safe for status and logs."""
    chain = list(_chain(exc))
    message = redact(str(exc) or type(exc).__name__, creds)
    for link in chain:
        if isinstance(link, TransportRefused):
            detail = redact(str(link), creds)
            return link.reason, message if detail in message else f"{message}: {detail}"
    text = "\n".join(str(link) for link in chain).lower()
    for reason, pattern in _PATTERNS:
        if pattern.search(text):
            return reason, message
    return GitFailure.TRANSFER_FAILED, message


def redact(message: str, creds: HoldsSecrets | None = None) -> str:
    """`message` without URL credentials, auth headers, known token shapes or secret values."""
    if creds is not None:
        for value in creds.secret_values():
            message = message.replace(value, "***")
    message = _URL_USERINFO.sub(r"\1", message)
    message = _AUTH_HEADER.sub(r"\1 ***", message)
    message = _KNOWN_TOKENS.sub("***", message)
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 1] + "…"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        link = todo.pop(0)
        if id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        todo.extend(e for e in (link.__cause__, link.__context__) if e is not None)
