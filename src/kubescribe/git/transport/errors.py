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
    PROXY_UNREACHABLE = c.PROXY_UNREACHABLE
    PROXY_REFUSED = c.PROXY_REFUSED
    LOCAL_REF_MISSING = c.LOCAL_REF_MISSING
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
# libgit2 lists a repository's references, then reads them one by one (its local transport,
# and fetch negotiation over the cache's own): one removed in between fails the whole transfer
# with "reference '<name>' not found". That is contention with another writer, not a missing
# repository; a name in the cache's own namespaces is the cache's bookkeeping.
_VANISHED_REF = re.compile(r"reference '([^']+)' not found|no such reference '([^']+)'")
_CACHE_REFS = ("refs/remotes/", "refs/kubescribe/push/")
# A push that lost to another update of the branch: libgit2's own checks (the remote tip is
# not known locally; not a fast-forward; a file:// compare-and-swap or ref lock that lost) and
# what git servers answer over SSH and HTTPS (receive-pack's and the forges' wordings).
_LOST_RACE = re.compile(
    r"not present locally|non-fastforwardable|non-fast-forward|\bfetch first\b|stale info"
    r"|failed to update ref|cannot lock ref|failed to lock|incorrect old value"
    r"|old reference value does not match|reference with that name already exists",
    re.IGNORECASE,
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
    text = "\n".join(str(link) for link in chain)
    vanished = vanished_ref(text)
    if vanished is not None:
        local = vanished.startswith(_CACHE_REFS)
        return (GitFailure.LOCAL_REF_MISSING if local else GitFailure.TRANSFER_FAILED), message
    text = text.lower()
    for reason, pattern in _PATTERNS:
        if pattern.search(text):
            return reason, message
    return GitFailure.TRANSFER_FAILED, message


def vanished_ref(text: str) -> str | None:
    """The reference libgit2 found listed but not readable, named in `text` (None: none)."""
    found = _VANISHED_REF.search(text)
    return None if found is None else found.group(1) or found.group(2)


def lost_race(text: str) -> bool:
    """`text` says a push lost to another update of the branch: fetch, rebuild, push again."""
    return _LOST_RACE.search(text) is not None


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
