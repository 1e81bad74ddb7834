"""Shared by the kustomize end-to-end tests: `kustomize build` of the remote's folders, the live
objects as a GitTarget's default content writes them, and a kustomized folder mirrored."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubescribe.mirror.owned import Content, keep_owned
from kubescribe.mirror.sanitize import sanitize
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from kubescribe_devenv.kustomize import build_remote
from tests.manifests import provider, target, watch_rule
from tests.support import Operator, manifest, wait_condition, wait_for

OWNED = Content("Owned", ("horizontal-pod-autoscaler", "kube-controller-manager"))
RULE = {"apiGroups": ["", "apps"], "resources": ["configmaps", "deployments"]}

Objects = dict[tuple[str, str], Any]  # (kind, name) -> document


def rendered(remote: BareRemote, kbin: Path, roots: Sequence[str]) -> Objects:
    """What `kustomize build` of each of `roots` (folders of the remote's branch) renders."""
    docs = [d for root in roots for d in build_remote(kbin, remote.path, root)]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def live(cp: ControlPlane, ns: str) -> Objects:
    """The live ConfigMaps and Deployments of `ns` as the default (Owned) content writes them."""
    items = cp.get_json("configmaps,deployments", "-n", ns, "--show-managed-fields")["items"]
    return {
        (o["kind"], o["metadata"]["name"]): sanitize(o, keep_owned(o, OWNED).document)
        for o in items
        if o["metadata"]["name"] != "kube-root-ca.crt"
    }


def mirror_kustomized(
    cp: ControlPlane,
    ns: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    kbin: Path,
    files: Mapping[str, str],
    roots: Sequence[str],
    kustomize: Mapping[str, Any],
) -> Callable[[str], None]:
    """Commit `files`, deploy what `roots` render (the cluster was deployed from the repository),
    then mirror the folder `mirror` with the target's `kustomize` settings, its render check on,
    until it reports the render matching. Returns a step that waits until `kustomize build` of
    the roots equals the live objects again."""
    for path, content in files.items():
        remote.commit_foreign(path, content, f"add {path}")
    cp.apply(manifest(*rendered(remote, kbin, roots).values()))
    operator("--kustomize", str(kbin))
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror", kustomize={**kustomize, "renderCheck": True}),
            watch_rule("rule", ns, "mirror", RULE),
        )
    )
    wait_condition(cp, "gittarget", "mirror", ns, "RenderMatchesLive", "True")

    def in_step(what: str) -> None:
        wait_for(
            lambda: rendered(remote, kbin, roots) == live(cp, ns),
            timeout=30,
            interval=0.3,
            what=f"kustomize build == live after {what}",
        )

    return in_step
