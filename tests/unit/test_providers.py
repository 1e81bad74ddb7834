"""GitProvider runtime logic without I/O: URL policy in the plan, one writer per normalized
repository and branch across providers, Writable evidence, gating of targets, status."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pygit2
import pytest

from kubescribe.controller.desired import compile_plan, plan_provider
from kubescribe.controller.plan import Problem
from kubescribe.controller.provider_evidence import NOT_PROBED, Evidence, combine, push_evidence
from kubescribe.controller.provider_sources import Sources
from kubescribe.controller.providers import Providers, _State
from kubescribe.git.probe import Verdict
from kubescribe.git.records import WriteReport
from kubescribe.git.signing import SigningKey
from kubescribe.git.transport.secret import Credentials
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY


def obj(
    kind: str,
    name: str,
    spec: dict[str, Any],
    created: str = "2026-01-01T00:00:00Z",
    namespace: str = "ns",
) -> Any:
    return {
        "apiVersion": "kubescribe.io/v1alpha1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generation": 1,
            "creationTimestamp": created,
        },
        "spec": spec,
    }


def provider(name: str, url: str, namespace: str = "ns", **spec: Any) -> Any:
    return obj("GitProvider", name, {"url": url, **spec}, namespace=namespace)


def target(
    name: str,
    provider_name: str,
    path: str,
    created: str = "2026-01-01T00:00:00Z",
    namespace: str = "ns",
) -> Any:
    spec = {"providerRef": {"name": provider_name}, "branch": "main", "path": path}
    return obj("GitTarget", name, spec, created, namespace)


def plan_of(providers: list[Any], targets: list[Any], allow_file_urls: bool = False) -> Any:
    return compile_plan(
        providers, targets, [], [], [], DEFAULT_NOISE_POLICY, allow_file_urls=allow_file_urls
    )


# --- URL policy -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        ("file:///srv/git/repo.git", "SchemeNotAllowed"),
        ("/srv/git/repo.git", "SchemeNotAllowed"),
        ("http://git.example/repo.git", "SchemeNotAllowed"),
        ("https://bot:hunter2@git.example/repo.git", "CredentialsInURL"),
        ("https://169.254.169.254/repo.git", "AddressNotAllowed"),
        ("ext::sh%20-c%20touch", "SchemeNotAllowed"),
    ],
)
def test_refused_urls_make_the_provider_invalid(url: str, detail: str) -> None:
    plan = plan_provider(provider("git", url))
    assert plan.problem is not None
    assert plan.problem.reason == "UrlRefused"
    assert detail in plan.problem.message
    assert "hunter2" not in plan.problem.message
    assert plan.normalized_url == ""


def test_file_urls_only_with_the_operator_flag() -> None:
    url = "file:///srv/git/repo.git"
    assert plan_provider(provider("git", url), allow_file_urls=True).problem is None
    plan = plan_of([provider("git", url)], [target("t", "git", "a")])
    assert plan.targets[TargetKey("ns", "t")].problem.reason == "ProviderNotReady"


# --- one writer per repository and branch ---------------------------------------------------


def test_providers_spelling_one_repository_differently_share_a_worker_key() -> None:
    plan = plan_of(
        [
            provider("a", "ssh://git@Git.Example:22/org/repo.git"),
            provider("b", "git@git.example:org/repo"),
        ],
        [target("ta", "a", "teams/a"), target("tb", "b", "teams/b")],
    )
    ta, tb = plan.targets[TargetKey("ns", "ta")], plan.targets[TargetKey("ns", "tb")]
    assert ta.writable
    assert tb.writable
    assert ta.worker_key == tb.worker_key == ("ns", "ssh://git@git.example/org/repo", "main")


def test_namespaces_never_share_a_writer_for_one_repository_and_branch() -> None:
    """Tenant B's provider for A's repository gets a writer of its own: B's documents are never
    pushed with A's credentials or signed with A's key."""
    url = "https://git.example/org/repo.git"
    plan = plan_of(
        [provider("git", url, namespace="team-a"), provider("git", url, namespace="team-b")],
        [
            target("t", "git", "a", namespace="team-a"),
            target("t", "git", "b", namespace="team-b"),
        ],
    )
    ta, tb = plan.targets[TargetKey("team-a", "t")], plan.targets[TargetKey("team-b", "t")]
    assert ta.worker_key == ("team-a", "https://git.example/org/repo", "main")
    assert tb.worker_key == ("team-b", "https://git.example/org/repo", "main")


def test_an_older_target_of_another_namespace_never_takes_a_folder_away() -> None:
    """Folders are claimed within a namespace: tenant B cannot block A's target by claiming
    A's folder first (a writer of B only ever writes with B's own credentials)."""
    url = "https://git.example/org/repo.git"
    plan = plan_of(
        [provider("git", url, namespace="team-a"), provider("git", url, namespace="team-b")],
        [
            target("squatter", "git", "apps", "2026-01-01T00:00:00Z", namespace="team-b"),
            target("mirror", "git", "apps", "2026-01-02T00:00:00Z", namespace="team-a"),
        ],
    )
    assert plan.targets[TargetKey("team-a", "mirror")].writable


def test_overlapping_folders_of_targets_of_different_providers_are_refused() -> None:
    plan = plan_of(
        [
            provider("a", "https://git.example/org/repo.git"),
            provider("b", "https://GIT.example/org/repo/"),
        ],
        [
            target("older", "a", "clusters", created="2026-01-01T00:00:00Z"),
            target("newer", "b", "clusters/prod", created="2026-01-02T00:00:00Z"),
        ],
    )
    newer = plan.targets[TargetKey("ns", "newer")]
    assert newer.path_problem is not None
    assert newer.path_problem.reason == "PathOverlap"
    assert "older" in newer.path_problem.message
    assert plan.targets[TargetKey("ns", "older")].writable


# --- Writable evidence ------------------------------------------------------------------------

DENIED_BY_PUSH = Evidence("False", "PermissionDenied", "hook declined", "push", 100.0)
DENIED_BY_PROBE = Evidence("False", "PermissionDenied", "403", "probe", 100.0)
PROBE_OK = Evidence("True", "Writable", "receive-pack offered", "probe", 200.0)
PROBE_UNKNOWN = Evidence("Unknown", "RemoteUnreachable", "no route", "probe", 200.0)


def test_a_probe_that_cannot_run_never_clears_a_denial() -> None:
    assert combine(DENIED_BY_PROBE, PROBE_UNKNOWN) == DENIED_BY_PROBE
    assert combine(DENIED_BY_PUSH, PROBE_UNKNOWN) == DENIED_BY_PUSH


def test_the_push_probe_does_not_clear_a_denial_seen_on_a_real_push() -> None:
    assert combine(DENIED_BY_PUSH, PROBE_OK) == DENIED_BY_PUSH
    assert combine(DENIED_BY_PROBE, PROBE_OK) == PROBE_OK  # the probe's own verdict can change


def test_unknown_replaces_unknown_or_true() -> None:
    assert combine(NOT_PROBED, PROBE_UNKNOWN) == PROBE_UNKNOWN
    assert combine(PROBE_OK, PROBE_UNKNOWN) == PROBE_UNKNOWN


def report(ok: bool, reason: str, pushed_at: float | None, commit: str | None = None) -> Any:
    return WriteReport(
        target=TargetKey("ns", "t"),
        ok=ok,
        reason=reason,
        message="msg",
        commit=commit,
        pushed_at=pushed_at,
    )


def test_push_reports_deny_and_a_later_accepted_push_clears() -> None:
    denied = push_evidence(PROBE_OK, report(False, "PermissionDenied", None), now=300.0)
    assert (denied.status, denied.source) == ("False", "push")
    assert push_evidence(denied, report(True, "Pushed", 250.0, "a" * 40), now=400.0) == denied
    cleared = push_evidence(denied, report(True, "Pushed", 350.0, "b" * 40), now=400.0)
    assert cleared.status == "True"
    assert "bbbbbbbbbbbb" in cleared.message
    unreachable = push_evidence(PROBE_OK, report(False, "RemoteUnreachable", None), now=300.0)
    assert unreachable == PROBE_OK


# --- gating and status ------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _libgit2_home() -> Iterator[None]:
    """`Providers` points libgit2's (process-wide) home at its cache dir: put it back."""
    previous = pygit2.settings.homedir
    yield
    if previous is not None:
        pygit2.settings.homedir = previous


def providers_with(tmp_path: Path, key: tuple[str, str], spec: Any, sources: Sources | None) -> Any:
    runtime = Providers(None, cache_dir=tmp_path)  # type: ignore[arg-type]
    state = _State(key, spec, spec.model_dump_json(), sources)
    runtime._states[key] = state
    return runtime, state


def test_targets_wait_while_signing_is_configured_without_a_key(tmp_path: Path) -> None:
    signing = {"secretRef": {"name": "sign"}}
    plan = plan_of([provider("git", "https://git.example/r.git", signing=signing)], [
        target("t", "git", "a")
    ])  # fmt: skip
    p = plan.providers[("ns", "git")]
    missing = Problem("SigningKeyMissing", "Secret 'sign' (spec.signing) not found")
    runtime, _ = providers_with(
        tmp_path, p.key, p.spec, Sources((), Credentials(), signing_problem=missing)
    )
    runtime.gate(plan)
    t = plan.targets[TargetKey("ns", "t")]
    assert not t.writable
    assert t.problem.reason == "SigningKeyMissing"
    conds, extra = runtime.status(p)
    by_type = {cond.type: cond for cond in conds}
    assert by_type["SigningKeyLoaded"].status == "False"
    assert (by_type["Ready"].status, by_type["Ready"].reason) == ("False", "SigningKeyMissing")
    assert by_type["Stalled"].status == "True"
    assert "signingKey" not in extra


def test_status_publishes_the_signing_key_and_ready_follows_the_read_probe(
    tmp_path: Path,
) -> None:
    signing = {"secretRef": {"name": "sign"}}
    plan = plan_of([provider("git", "https://git.example/r.git", signing=signing)], [])
    p = plan.providers[("ns", "git")]
    key = SigningKey.generate()
    runtime, state = providers_with(tmp_path, p.key, p.spec, Sources((), Credentials(), signer=key))
    conds, extra = runtime.status(p)
    by_type = {cond.type: cond for cond in conds}
    assert (by_type["Ready"].status, by_type["Ready"].reason) == ("Unknown", "Progressing")
    assert extra["signingKey"] == {"publicKey": key.public_key_line, "fingerprint": key.fingerprint}

    state.readable = Verdict("False", "AuthenticationFailed", "the password was refused")
    state.writable = DENIED_BY_PROBE
    by_type = {cond.type: cond for cond in runtime.status(p)[0]}
    assert (by_type["Ready"].status, by_type["Ready"].reason) == ("False", "AuthenticationFailed")
    assert by_type["Writable"].status == "False"

    state.readable = Verdict("True", "Readable", "Connected")
    by_type = {cond.type: cond for cond in runtime.status(p)[0]}
    assert by_type["Ready"].status == "True"  # Writable is reported, Ready is about reading
    assert (by_type["Writable"].status, by_type["Writable"].reason) == (
        "False",
        "PermissionDenied",
    )


class _Worker:
    url = "https://git.example/r.git"

    def __init__(self) -> None:
        self.signers: list[Any] = []

    def set_signer(self, signer: Any) -> None:
        self.signers.append(signer)

    def retry_now(self) -> None:
        pass


def test_a_writer_never_takes_credentials_or_a_signing_key_from_another_namespace(
    tmp_path: Path,
) -> None:
    signing = {"secretRef": {"name": "sign"}}
    url = "https://git.example/r.git"
    plan = plan_of(
        [
            provider("git", url, namespace="team-a", signing=signing),
            provider("git", url, namespace="team-b"),
        ],
        [target("t", "git", "b", namespace="team-b")],
    )
    a = plan.providers[("team-a", "git")]
    creds_a = Credentials(password="a-token")
    runtime, _ = providers_with(
        tmp_path, a.key, a.spec, Sources((), creds_a, signer=SigningKey.generate())
    )
    worker_key = plan.targets[TargetKey("team-b", "t")].worker_key
    worker = _Worker()
    runtime.callbacks(worker_key, url)
    runtime.assign(worker_key, [("team-a", "git"), ("team-b", "git")], worker)
    slot = runtime._slots[worker_key]
    assert slot.creds is not creds_a
    assert slot.provider is None
    assert slot.signer is None
    assert worker.signers == []
