"""The matching rule of `GitTarget.spec.ignore.changesBy` (`mirror/ignore.py`)."""

from __future__ import annotations

import pytest

from kubescribe.mirror.ignore import NO_IGNORE, IgnoredBy, IgnoreRule, InvalidIgnore

FLUX = "system:serviceaccount:flux-system:kustomize-controller"


def rule() -> IgnoreRule:
    return IgnoreRule.parse(
        users=["alice", "oidc:bob@example.org"],
        service_accounts=["flux-system/kustomize-controller", "argocd/*"],
        field_managers=["kustomize-controller", "argocd-controller"],
    )


def test_a_listed_field_manager_drops_the_change_without_an_author() -> None:
    assert rule().ignores("kustomize-controller", "") is IgnoredBy.FIELD_MANAGER
    assert rule().ignores("argocd-controller", "carol") is IgnoredBy.FIELD_MANAGER


def test_the_field_manager_is_matched_exactly() -> None:
    assert rule().ignores("kustomize-controller-2", "") is None
    assert rule().ignores("Kustomize-Controller", "") is None
    assert rule().ignores("", "") is None  # no sole newest manager, and no author


def test_a_listed_user_drops_the_change_by_username() -> None:
    assert rule().ignores("kubectl-edit", "alice") is IgnoredBy.USER
    assert rule().ignores("kubectl-edit", "oidc:bob@example.org") is IgnoredBy.USER
    assert rule().ignores("kubectl-edit", "alice2") is None
    assert rule().ignores("kubectl-edit", "bob@example.org") is None


def test_service_accounts_match_by_namespace_and_name_or_the_whole_namespace() -> None:
    assert rule().ignores("kubectl-edit", FLUX) is IgnoredBy.SERVICE_ACCOUNT
    other = "system:serviceaccount:flux-system:helm-controller"
    assert rule().ignores("kubectl-edit", other) is None
    anyone = "system:serviceaccount:argocd:argocd-application-controller"
    assert rule().ignores("kubectl-edit", anyone) is IgnoredBy.SERVICE_ACCOUNT
    assert rule().ignores("kubectl-edit", "system:serviceaccount:argocd2:x") is None


def test_a_service_account_is_not_a_user_of_the_same_name() -> None:
    only_users = IgnoreRule.parse(users=["kustomize-controller"])
    assert only_users.ignores("x", FLUX) is None
    by_full_name = IgnoreRule.parse(users=[FLUX])
    assert by_full_name.ignores("x", FLUX) is IgnoredBy.SERVICE_ACCOUNT


def test_the_field_manager_is_checked_before_the_author() -> None:
    assert rule().ignores("kustomize-controller", "alice") is IgnoredBy.FIELD_MANAGER


def test_needs_author_only_for_users_and_service_accounts() -> None:
    assert not IgnoreRule.parse(field_managers=["helm"]).needs_author
    assert IgnoreRule.parse(users=["alice"]).needs_author
    assert IgnoreRule.parse(service_accounts=["a/b"]).needs_author
    assert not NO_IGNORE
    assert not NO_IGNORE.needs_author
    assert NO_IGNORE.ignores("helm", "alice") is None


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        ({"users": [""]}, "users[0]"),
        ({"users": ["ok", "  "]}, "users[1]"),
        ({"users": ["x" * 513]}, "users[0]"),
        ({"service_accounts": ["kustomize-controller"]}, "serviceAccounts[0]"),
        ({"service_accounts": ["flux-system/"]}, "serviceAccounts[0]"),
        ({"service_accounts": ["/x"]}, "serviceAccounts[0]"),
        ({"service_accounts": ["Flux/x"]}, "serviceAccounts[0]"),
        ({"service_accounts": ["a/b/c"]}, "serviceAccounts[0]"),
        ({"service_accounts": ["*/x"]}, "serviceAccounts[0]"),
        ({"field_managers": [""]}, "fieldManagers[0]"),
        ({"field_managers": ["m" * 129]}, "fieldManagers[0]"),
    ],
)
def test_entries_that_can_never_match_are_refused_with_their_place(
    kwargs: dict[str, list[str]], where: str
) -> None:
    with pytest.raises(InvalidIgnore) as caught:
        IgnoreRule.parse(**kwargs)
    assert str(caught.value).startswith(f"spec.ignore.changesBy.{where}: ")
