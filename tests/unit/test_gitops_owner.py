"""GitOps ownership from an object's labels and annotations, and the commit link of a remote:
the pure rules behind an Alert message's `managedBy` and `commitUrl` (docs/alerts.md)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kubescribe.api.models import GitProviderSpec
from kubescribe.mirror.gitops_owner import MAX_VALUE, GitOpsOwner, gitops_owner
from kubescribe.net.weblinks import commit_url, commit_url_template, derived_template

SHA = "3f1c2d4e5f60718293a4b5c6d7e8f90123456789"


def obj(
    labels: dict[str, Any] | None = None,
    annotations: dict[str, Any] | None = None,
    kind: str = "Deployment",
    name: str = "web",
    namespace: str = "prod",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": metadata}


FLUX_KS = {
    "kustomize.toolkit.fluxcd.io/name": "apps",
    "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
}
FLUX_HR = {"helm.toolkit.fluxcd.io/name": "podinfo", "helm.toolkit.fluxcd.io/namespace": "apps"}


def test_a_flux_kustomization_is_named_with_its_line() -> None:
    owner = gitops_owner(obj(FLUX_KS))
    assert owner == GitOpsOwner("Flux", "Kustomization", "flux-system", "apps")
    assert owner.as_json() == {
        "tool": "Flux",
        "kind": "Kustomization",
        "namespace": "flux-system",
        "name": "apps",
    }
    assert owner.line == "changed outside Flux: kustomization flux-system/apps"


def test_a_helm_release_is_the_nearer_owner_than_its_kustomization() -> None:
    owner = gitops_owner(obj({**FLUX_KS, **FLUX_HR}))
    assert owner == GitOpsOwner("Flux", "HelmRelease", "apps", "podinfo")
    assert owner.line == "changed outside Flux: helmrelease apps/podinfo"


def test_argo_tracking_id_names_the_application_when_it_tracks_this_object() -> None:
    tracking = {"argocd.argoproj.io/tracking-id": "guestbook:apps/Deployment:prod/web"}
    assert gitops_owner(obj(annotations=tracking)) == GitOpsOwner(
        "Argo CD", "Application", "", "guestbook"
    )
    in_namespace = {"argocd.argoproj.io/tracking-id": "team-a_guestbook:apps/Deployment:prod/web"}
    owner = gitops_owner(obj(annotations=in_namespace))
    assert owner == GitOpsOwner("Argo CD", "Application", "team-a", "guestbook")
    assert owner.line == "changed outside Argo CD: application team-a/guestbook"
    core = {"argocd.argoproj.io/tracking-id": "guestbook:/ConfigMap:prod/web"}
    assert gitops_owner(obj(annotations=core, kind="ConfigMap")) is not None
    # Copied from another object (a clone, a template): not this object's tracking.
    copied = {"argocd.argoproj.io/tracking-id": "guestbook:apps/Deployment:prod/other"}
    assert gitops_owner(obj(annotations=copied)) is None


def test_the_instance_label_alone_is_helm_or_kustomize_not_argo() -> None:
    helm = {"app.kubernetes.io/instance": "web", "app.kubernetes.io/managed-by": "Helm"}
    assert gitops_owner(obj(helm)) is None
    marked = obj({"app.kubernetes.io/instance": "guestbook"}, {"argocd.argoproj.io/sync-wave": "1"})
    owner = gitops_owner(marked)
    assert owner == GitOpsOwner("Argo CD", "Application", "", "guestbook")
    assert owner.as_json()["namespace"] is None
    assert owner.line == "changed outside Argo CD: application guestbook"


@pytest.mark.parametrize(
    "document",
    [
        None,
        {},
        {"metadata": None},
        {"metadata": ["x"]},
        {"metadata": {"labels": "x", "annotations": 7}},
        obj({"kustomize.toolkit.fluxcd.io/name": "apps"}),  # no namespace
        obj({"kustomize.toolkit.fluxcd.io/name": 1, "kustomize.toolkit.fluxcd.io/namespace": 2}),
        obj({**FLUX_KS, "kustomize.toolkit.fluxcd.io/name": " "}),
        obj(annotations={"argocd.argoproj.io/tracking-id": "no-colons"}),
        obj(annotations={"argocd.argoproj.io/tracking-id": "a:b:c:d:e/f/g"}),
        obj(annotations={"argocd.argoproj.io/tracking-id": "x" * 100_000}),
        obj({1: "x", "app.kubernetes.io/instance": "a"}, {None: "argocd.argoproj.io/x"}),  # type: ignore[dict-item]
    ],
)
def test_hostile_metadata_is_no_owner_and_never_raises(document: Any) -> None:
    assert gitops_owner(document) is None


def test_a_long_value_is_cut() -> None:
    long = "a" * 100_000
    labels = {"helm.toolkit.fluxcd.io/name": long, "helm.toolkit.fluxcd.io/namespace": long}
    owner = gitops_owner(obj(labels))
    assert owner is not None
    assert len(owner.name) == len(owner.namespace) == MAX_VALUE


@pytest.mark.parametrize(
    ("remote", "page"),
    [
        ("https://github.com/acme/mirror.git", "https://github.com/acme/mirror/commit/{sha}"),
        ("git@github.com:acme/mirror.git", "https://github.com/acme/mirror/commit/{sha}"),
        ("ssh://git@github.com:22/acme/mirror", "https://github.com/acme/mirror/commit/{sha}"),
        ("https://x-token@GitHub.com/acme/mirror/", "https://github.com/acme/mirror/commit/{sha}"),
        (
            "https://gitlab.com/group/sub/mirror.git",
            "https://gitlab.com/group/sub/mirror/-/commit/{sha}",
        ),
        ("git@gitlab.com:group/mirror.git", "https://gitlab.com/group/mirror/-/commit/{sha}"),
        ("git@bitbucket.org:ws/mirror.git", "https://bitbucket.org/ws/mirror/commits/{sha}"),
        ("https://bitbucket.org/ws/mirror", "https://bitbucket.org/ws/mirror/commits/{sha}"),
    ],
)
def test_a_known_forge_gets_its_commit_page(remote: str, page: str) -> None:
    assert derived_template(remote) == page
    assert commit_url(derived_template(remote), SHA) == page.replace("{sha}", SHA)


@pytest.mark.parametrize(
    "remote",
    [
        "https://git.example.org/team/repo.git",  # not a known forge: set the template
        "https://github.com/acme",  # no repository
        "https://github.com/acme/mirror/extra",  # not a repository path
        "https://github.com/acme/../etc",
        "https://github.com/acme/mirror%2F..",
        "git@github.com:acme/<script>.git",
        "file:///srv/git/repo.git",
        "/srv/git/repo.git",
        "ext::sh -c x",
        "https://[zz]/a/b",
        "",
    ],
)
def test_other_remotes_get_no_derived_page(remote: str) -> None:
    assert derived_template(remote) is None


def test_an_explicit_template_wins_and_a_sha_is_checked() -> None:
    template = "https://git.example.org/team/repo/-/commit/{sha}"
    assert commit_url_template("git@github.com:acme/mirror.git", template) == template
    assert commit_url(template, SHA) == f"https://git.example.org/team/repo/-/commit/{SHA}"
    assert commit_url(template, "not-a-sha") is None
    assert commit_url(None, SHA) is None


@pytest.mark.parametrize(
    "template",
    [
        "http://git.example.org/commit/{sha}",  # https only
        "https://git.example.org/commit/",  # no placeholder
        "https://git.example.org/{sha}/{sha}",  # twice
        "https://git.example.org/{ref}/{sha}",  # another placeholder
        "https://git.example.org/ {sha}",
        "javascript:alert(1)//{sha}",
    ],
)
def test_a_template_is_https_with_exactly_one_sha(template: str) -> None:
    with pytest.raises(ValidationError):
        GitProviderSpec.model_validate({"url": "https://x/y.git", "commitUrlTemplate": template})
    assert commit_url_template("https://x/y.git", template) is None
