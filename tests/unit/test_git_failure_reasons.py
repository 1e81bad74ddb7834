"""Which reason a failed fetch or push reports: only a remote that does not answer is
`RemoteUnreachable`; a lost race is `PushRejected`; a vanished bookkeeping ref of the cache is
`LocalRefMissing`; a ref that vanished on a file:// remote while listed is not a missing
repository."""

from __future__ import annotations

import pygit2
import pytest

from kubescribe.api import conditions as c
from kubescribe.git.repo import (
    LocalRefMissing,
    PushDenied,
    PushRejected,
    RemoteError,
    RemoteUnavailable,
    transfer_error,
)
from kubescribe.git.transport.errors import (
    GitFailure,
    classify_git_error,
    lost_race,
    vanished_ref,
)

# A lost compare-and-swap race, as libgit2 (client side, and its file:// ref updates) and git
# servers over SSH and HTTPS word it (`refname: message` from the push status report).
LOST_RACES = [
    "cannot push because a reference that you are trying to update on the remote contains "
    "commits that are not present locally.",
    "cannot push non-fastforwardable reference",
    "failed to write reference 'refs/heads/main': a reference with that name already exists.",
    "old reference value does not match",
    "failed to lock file '/srv/r.git/refs/heads/main.lock' for writing: ",
    "refs/heads/main: non-fast-forward",
    "refs/heads/main: fetch first",
    "refs/heads/main: failed to update ref",
    "refs/heads/main: cannot lock ref 'refs/heads/main': is at 1a2b but expected 3c4d",
    "refs/heads/main: stale info",
    "refs/heads/main: incorrect old value provided",
]
NOT_RACES = [
    "failed to connect to git.example: Connection refused",
    "refs/heads/main: protected branch hook declined",
    "unexpected http status code: 403",
    "early EOF",
    "reference 'refs/remotes/origin/main' not found",
]


@pytest.mark.parametrize("message", LOST_RACES)
def test_lost_races_are_recognised(message: str) -> None:
    assert lost_race(message)


@pytest.mark.parametrize("message", NOT_RACES)
def test_other_failures_are_not_races(message: str) -> None:
    assert not lost_race(message)


@pytest.mark.parametrize("message", LOST_RACES)
def test_a_lost_race_in_a_push_is_push_rejected(message: str) -> None:
    reason, text = classify_git_error(pygit2.GitError(message))
    error = transfer_error("push failed", reason, text, pushing=True)
    assert type(error) is PushRejected
    assert error.reason == c.PUSH_REJECTED


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("reference 'refs/remotes/origin/main' not found", GitFailure.LOCAL_REF_MISSING),
        ("reference 'refs/remotes/origin/team/a' not found", GitFailure.LOCAL_REF_MISSING),
        ("no such reference 'refs/kubescribe/push/main'", GitFailure.LOCAL_REF_MISSING),
        # On a file:// remote: another writer's ref, gone between listing and reading.
        ("reference 'refs/kubescribe/incoming/main' not found", GitFailure.TRANSFER_FAILED),
        ("reference 'refs/heads/feature' not found", GitFailure.TRANSFER_FAILED),
        # A repository that is not there is still that.
        ("could not find repository at '/srv/gone.git'", GitFailure.REPOSITORY_NOT_FOUND),
        ("failed to connect to git.example: Connection refused", GitFailure.REMOTE_UNREACHABLE),
    ],
)  # fmt: skip
def test_vanished_references_are_contention_not_absence(message: str, reason: GitFailure) -> None:
    assert classify_git_error(pygit2.GitError(message)) == (reason, message)


def test_vanished_ref_names_the_reference() -> None:
    assert vanished_ref("x: reference 'refs/remotes/origin/a' not found") == (
        "refs/remotes/origin/a"
    )
    assert vanished_ref("no such reference 'refs/kubescribe/push/a'") == "refs/kubescribe/push/a"
    assert vanished_ref("Repository not found") is None


@pytest.mark.parametrize("pushing", [False, True])
def test_a_missing_tracking_ref_is_local_never_unreachable(pushing: bool) -> None:
    message = "reference 'refs/remotes/origin/main' not found"
    reason, text = classify_git_error(pygit2.GitError(message))
    error = transfer_error("fetch failed", reason, text, pushing=pushing)
    assert type(error) is LocalRefMissing
    assert error.reason == c.LOCAL_REF_MISSING


@pytest.mark.parametrize(
    ("message", "kind", "reason"),
    [
        ("failed to connect to h: Connection refused", RemoteUnavailable, c.REMOTE_UNREACHABLE),
        ("unexpected http status code: 403", PushDenied, c.PERMISSION_DENIED),
        ("protected branch hook declined; non-fast-forward", PushDenied, c.PERMISSION_DENIED),
        ("unexpected http status code: 500", RemoteUnavailable, c.TRANSFER_FAILED),
        ("reference 'refs/heads/x' not found", RemoteUnavailable, c.TRANSFER_FAILED),
    ],
)  # fmt: skip
def test_push_failures_map_to_their_reason(
    message: str, kind: type[RemoteError], reason: str
) -> None:
    classified, text = classify_git_error(pygit2.GitError(message))
    error = transfer_error("push failed", classified, text, pushing=True)
    assert type(error) is kind
    assert error.reason == reason


def test_a_fetch_is_never_a_lost_race() -> None:
    """Race wording in a fetch's error (a server's ref lock) is a failed transfer."""
    reason, text = classify_git_error(pygit2.GitError("cannot lock ref 'refs/heads/main'"))
    error = transfer_error("fetch failed", reason, text)
    assert type(error) is RemoteUnavailable
    assert error.reason == c.TRANSFER_FAILED
