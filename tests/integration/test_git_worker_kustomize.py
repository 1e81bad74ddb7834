"""Writing through kustomizations: the branch worker against a real bare repository, and the
real `kustomize build` of the folder after every write compared with the live objects."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kubescribe.api.conditions import KUSTOMIZE_UNSUPPORTED, RENDER_MISMATCH
from kubescribe.git.targets import KustomizeConfig
from kubescribe.mirror.changes import Change, Operation, PruneMode
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.yamlfmt import dump_yaml, order_document
from kubescribe_devenv import kustomize
from kubescribe_devenv.gitremote import BareRemote
from tests.builders import CONFIGMAPS, TARGET, cursor, snapshot, target
from tests.support import WorkerHarness

DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
FOLDER = "apps"
NS = "prod"

BASE_KUSTOMIZATION = """\
# shared by every environment
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - settings.yaml   # app settings
  - web.yaml
"""
OVERLAY_KUSTOMIZATION = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: prod  # everything lands here
namePrefix: prod-
resources:
  - ../../base
images:
  # pinned by the release process
  - name: nginx
    newTag: "1.27"
replicas:
  - name: web
    count: 2
"""


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": data,
    }


def deployment(name: str, image: str, replicas: int) -> dict[str, Any]:
    labels = {"app": "web"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


def change(doc: dict[str, Any] | None, rtype: ResourceType, name: str, op: Operation) -> Change:
    identity = Identity(rtype.group, rtype.kind, NS, name)
    return Change(TARGET, op, identity, rtype, doc, time.monotonic(), cursor())


def seed(remote: BareRemote) -> None:
    settings = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}
    web = deployment("web", "nginx:1.25", 1)
    web["metadata"] = {"name": "web"}
    base = {
        "settings.yaml": dump_yaml(order_document({**settings, "data": {"mode": "fast"}})),
        "web.yaml": dump_yaml(order_document(web)),
        "kustomization.yaml": BASE_KUSTOMIZATION,
    }
    for name, content in base.items():
        remote.commit_foreign(f"{FOLDER}/base/{name}", content, f"base {name}")
    remote.commit_foreign(
        f"{FOLDER}/overlays/prod/kustomization.yaml", OVERLAY_KUSTOMIZATION, "overlay"
    )


def rendered(remote: BareRemote, kbin: Path) -> dict[tuple[str, str], dict[str, Any]]:
    docs = kustomize.build_remote(kbin, remote.path, f"{FOLDER}/overlays/prod")
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def kz_target(**kw: Any) -> Any:
    return target(
        PruneMode.ALWAYS, folder=FOLDER, kustomize=KustomizeConfig(root="overlays/prod", **kw)
    )


async def test_base_and_overlay_render_the_live_objects_after_every_write(
    remote: BareRemote,
    make: Callable[..., WorkerHarness],
    kbin: Path,
) -> None:
    seed(remote)
    h = make(kz_target())
    live: dict[tuple[str, str], dict[str, Any]] = {
        ("ConfigMap", "prod-settings"): configmap("prod-settings", mode="fast"),
        ("Deployment", "prod-web"): deployment("prod-web", "nginx:1.27", 2),
    }
    assert rendered(remote, kbin) == live  # the seed renders the cluster

    async def step(item: Change) -> None:
        await h.settle(item)
        assert h.last().failing == []
        assert rendered(remote, kbin) == live

    # A ConfigMap inherited from the base: the base is read-only, the change is a patch of the
    # overlay naming the object as the base renders it; back as the base has it, it goes.
    base_files = {n: remote.read(f"{FOLDER}/base/{n}") for n in ("settings.yaml", "web.yaml")}
    patch = f"{FOLDER}/overlays/prod/patches/prod/configmap_settings.yaml"
    live["ConfigMap", "prod-settings"] = configmap("prod-settings", mode="slow")
    await step(
        change(live["ConfigMap", "prod-settings"], CONFIGMAPS, "prod-settings", Operation.UPDATE)
    )
    assert yaml.safe_load(remote.read(patch)) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"mode": "slow"},
    }
    assert "patches:\n  - path: patches/prod/configmap_settings.yaml\n" in remote.read(
        f"{FOLDER}/overlays/prod/kustomization.yaml"
    )
    live["ConfigMap", "prod-settings"] = configmap("prod-settings", mode="fast")
    await step(
        change(live["ConfigMap", "prod-settings"], CONFIGMAPS, "prod-settings", Operation.UPDATE)
    )
    assert patch not in remote.files()
    assert "patches" not in remote.read(f"{FOLDER}/overlays/prod/kustomization.yaml")

    # A new ConfigMap: a file under the overlay, listed in its resources (sorted, comments kept).
    live["ConfigMap", "prod-extra"] = configmap("prod-extra", a="1")
    await step(change(live["ConfigMap", "prod-extra"], CONFIGMAPS, "prod-extra", Operation.CREATE))
    overlay = remote.read(f"{FOLDER}/overlays/prod/kustomization.yaml")
    assert "  - ../../base\n  - prod/core/configmaps/extra.yaml\n" in overlay
    assert "namespace: prod  # everything lands here" in overlay
    assert "  # pinned by the release process\n" in overlay
    extra = yaml.safe_load(remote.read(f"{FOLDER}/overlays/prod/prod/core/configmaps/extra.yaml"))
    assert extra["metadata"] == {"name": "extra"}

    # An image update lands in the overlay's images:, the base keeps its own tag.
    live["Deployment", "prod-web"] = deployment("prod-web", "nginx:1.28", 2)
    await step(change(live["Deployment", "prod-web"], DEPLOYMENTS, "prod-web", Operation.UPDATE))
    overlay = remote.read(f"{FOLDER}/overlays/prod/kustomization.yaml")
    assert '    newTag: "1.28"\n' in overlay
    assert "nginx:1.25" in remote.read(f"{FOLDER}/base/web.yaml")

    # A scale lands in replicas:, the base keeps its count.
    live["Deployment", "prod-web"] = deployment("prod-web", "nginx:1.28", 5)
    await step(change(live["Deployment", "prod-web"], DEPLOYMENTS, "prod-web", Operation.UPDATE))
    overlay = remote.read(f"{FOLDER}/overlays/prod/kustomization.yaml")
    assert "  - name: web\n    count: 5\n" in overlay
    assert yaml.safe_load(remote.read(f"{FOLDER}/base/web.yaml"))["spec"]["replicas"] == 1

    # Deletes unlist the file (and a deleted workload's replicas: entry, or kustomize fails).
    del live["ConfigMap", "prod-extra"]
    await step(change(None, CONFIGMAPS, "prod-extra", Operation.DELETE))
    assert "extra.yaml" not in remote.read(f"{FOLDER}/overlays/prod/kustomization.yaml")
    del live["Deployment", "prod-web"]
    await step(change(None, DEPLOYMENTS, "prod-web", Operation.DELETE))
    # inherited: a `$patch: delete` of the overlay, the base untouched
    assert remote.read(f"{FOLDER}/base/kustomization.yaml") == BASE_KUSTOMIZATION
    assert {n: remote.read(f"{FOLDER}/base/{n}") for n in base_files} == base_files
    overlay = remote.read(f"{FOLDER}/overlays/prod/kustomization.yaml")
    assert "replicas" not in overlay
    assert overlay.endswith("patches:\n  - path: patches/prod/deployment.apps_web.yaml\n")
    assert yaml.safe_load(
        remote.read(f"{FOLDER}/overlays/prod/patches/prod/deployment.apps_web.yaml")
    ) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "$patch": "delete",
    }


async def test_snapshot_of_a_kustomized_folder_makes_no_commit(
    remote: BareRemote,
    make: Callable[..., WorkerHarness],
    kbin: Path,
) -> None:
    seed(remote)
    tip = remote.tip()
    h = make(kz_target())
    settings = Identity("", "ConfigMap", NS, "prod-settings")
    await h.settle(snapshot({settings: configmap("prod-settings", mode="fast")}, ns=NS))
    assert remote.tip() == tip
    assert h.last().documents == 2


GENERATOR_KUSTOMIZATION = """\
resources:
  - plain.yaml
configMapGenerator:
  - name: generated
    literals: [a=1]
"""


async def test_generated_configmap_is_reported_and_not_written(
    remote: BareRemote,
    make: Callable[..., WorkerHarness],
    kbin: Path,
) -> None:
    remote.commit_foreign(f"{FOLDER}/kustomization.yaml", GENERATOR_KUSTOMIZATION, "gen")
    remote.commit_foreign(
        f"{FOLDER}/plain.yaml",
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}),
        "plain",
    )
    tip = remote.tip()
    h = make(target(PruneMode.ALWAYS, folder=FOLDER, kustomize=KustomizeConfig()))
    doc = configmap("generated-7h2k5c9f8m", a="2")
    await h.settle(change(doc, CONFIGMAPS, "generated-7h2k5c9f8m", Operation.UPDATE))
    assert remote.tip() == tip  # nothing written
    (identity, reason, message), *_ = h.last().failing
    assert (identity.name, reason) == ("generated-7h2k5c9f8m", KUSTOMIZE_UNSUPPORTED)
    assert "configMapGenerator generated" in message
    kustomize.build_remote(kbin, remote.path, FOLDER)  # still builds


async def test_render_check_reports_what_kustomize_renders_differently(
    remote: BareRemote, make: Callable[..., WorkerHarness], kbin: Path
) -> None:
    # buildMetadata adds an annotation to every rendered object: the live ones lack it.
    kustomization = "buildMetadata: [originAnnotations]\nresources: []\n"
    remote.commit_foreign(f"{FOLDER}/kustomization.yaml", kustomization, "origin annotations")
    h = make(
        target(
            PruneMode.ALWAYS,
            folder=FOLDER,
            kustomize=KustomizeConfig(render_check=str(kbin)),
        )
    )
    await h.settle(change(configmap("a", k="1"), CONFIGMAPS, "a", Operation.CREATE))
    assert "prod/core/configmaps/a.yaml" in remote.read(f"{FOLDER}/kustomization.yaml")
    (identity, reason, message), *_ = h.last().failing
    assert (identity.name, reason) == ("a", RENDER_MISMATCH)
    assert "renders differently" in message

    remote.commit_foreign(
        f"{FOLDER}/kustomization.yaml", "resources:\n- prod/core/configmaps/a.yaml\n", "fix"
    )
    await h.settle(change(configmap("a", k="2"), CONFIGMAPS, "a", Operation.UPDATE))
    assert h.last().failing == []


async def test_object_of_a_multi_document_file_is_edited_in_its_document(
    remote: BareRemote, make: Callable[..., WorkerHarness], kbin: Path
) -> None:
    both = "\n---\n".join(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}})
        for n in ("one", "two")
    )
    remote.commit_foreign(f"{FOLDER}/kustomization.yaml", "resources: [both.yaml]\n", "k")
    remote.commit_foreign(f"{FOLDER}/both.yaml", both, "two in one file")
    tip = remote.tip()
    h = make(target(PruneMode.NEVER, folder=FOLDER, kustomize=KustomizeConfig()))
    doc = configmap("two", k="1")
    doc["metadata"].pop("namespace")
    item = Change(
        TARGET,
        Operation.UPDATE,
        Identity("", "ConfigMap", "", "two"),
        CONFIGMAPS,
        doc,
        time.monotonic(),
        cursor(),
    )
    await h.settle(item)
    assert remote.tip() != tip
    assert h.last().failing == []
    assert remote.files() == sorted([f"{FOLDER}/kustomization.yaml", f"{FOLDER}/both.yaml"])
    first, second = remote.read(f"{FOLDER}/both.yaml").split("\n---\n")
    assert first + "\n" == both.split("\n---\n")[0] + "\n"  # byte-identical
    assert yaml.safe_load(second)["data"] == {"k": "1"}
    kustomize.build_remote(kbin, remote.path, FOLDER)


async def test_write_unsupported_writes_a_plain_unlisted_file(
    remote: BareRemote, make: Callable[..., WorkerHarness], kbin: Path
) -> None:
    remote.commit_foreign(f"{FOLDER}/kustomization.yaml", GENERATOR_KUSTOMIZATION, "gen")
    remote.commit_foreign(
        f"{FOLDER}/plain.yaml",
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}),
        "plain",
    )
    h = make(
        target(PruneMode.ALWAYS, folder=FOLDER, kustomize=KustomizeConfig(write_unsupported=True))
    )
    doc = configmap("generated-7h2k5c9f8m", a="2")
    await h.settle(change(doc, CONFIGMAPS, "generated-7h2k5c9f8m", Operation.UPDATE))
    assert f"{FOLDER}/prod/core/configmaps/generated-7h2k5c9f8m.yaml" in remote.files()
    assert remote.read(f"{FOLDER}/kustomization.yaml") == GENERATOR_KUSTOMIZATION
    (identity, reason, _), *_ = h.last().failing
    assert (identity.name, reason) == ("generated-7h2k5c9f8m", KUSTOMIZE_UNSUPPORTED)
    kustomize.build_remote(kbin, remote.path, FOLDER)  # still builds


LABELLED_KUSTOMIZATION = """\
namespace: prod
commonLabels:
  team: shop  # selectors too
labels:
  - pairs: {tier: web}
    includeTemplates: true
commonAnnotations:
  owner: platform
resources:
  - base/settings.yaml
  - base/web.yaml
"""


async def test_labels_and_annotations_the_kustomization_sets_stay_out_of_the_files(
    remote: BareRemote, make: Callable[..., WorkerHarness], kbin: Path
) -> None:
    settings = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}
    web = deployment("web", "nginx:1.25", 1)
    web["metadata"] = {"name": "web"}
    remote.commit_foreign(f"{FOLDER}/kustomization.yaml", LABELLED_KUSTOMIZATION, "k")
    for name, doc in (("settings", {**settings, "data": {"a": "1"}}), ("web", web)):
        remote.commit_foreign(f"{FOLDER}/base/{name}.yaml", dump_yaml(order_document(doc)), name)
    h = make(target(PruneMode.ALWAYS, folder=FOLDER, kustomize=KustomizeConfig()))

    def build() -> dict[tuple[str, str], Any]:
        docs = kustomize.build_remote(kbin, remote.path, FOLDER)
        return {(d["kind"], d["metadata"]["name"]): d for d in docs}

    live = build()  # the cluster was deployed from the repository
    live["ConfigMap", "settings"]["data"] = {"a": "2"}
    await h.settle(change(live["ConfigMap", "settings"], CONFIGMAPS, "settings", Operation.UPDATE))
    assert h.last().failing == []
    assert build() == live
    web_live = live["Deployment", "web"]
    web_live["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "X", "value": "1"}]
    await h.settle(change(web_live, DEPLOYMENTS, "web", Operation.UPDATE))
    assert h.last().failing == []
    assert build() == live
    base_web = yaml.safe_load(remote.read(f"{FOLDER}/base/web.yaml"))
    assert base_web["metadata"] == {"name": "web"}
    assert base_web["spec"]["template"]["metadata"] == {"labels": {"app": "web"}}

    # A new object that carries what the kustomization sets: written without it.
    extra = configmap("extra", b="1")
    extra["metadata"] |= {"labels": {"team": "shop", "tier": "web"}}
    extra["metadata"]["annotations"] = {"owner": "platform"}
    live["ConfigMap", "extra"] = extra
    await h.settle(change(extra, CONFIGMAPS, "extra", Operation.CREATE))
    assert build() == live
    assert yaml.safe_load(remote.read(f"{FOLDER}/prod/core/configmaps/extra.yaml"))["metadata"] == {
        "name": "extra"
    }

    # One without them cannot be rendered from this folder: reported, not written.
    await h.settle(change(configmap("bare", c="1"), CONFIGMAPS, "bare", Operation.CREATE))
    (identity, reason, message), *_ = h.last().failing
    assert (identity.name, reason) == ("bare", KUSTOMIZE_UNSUPPORTED)
    assert "commonLabels in apps/kustomization.yaml" in message
    assert build() == live


PATCHED_KUSTOMIZATION = """\
resources:
  - web.yaml
patches:
  - path: a-patch.yaml
"""


async def test_patch_files_are_not_documents_and_a_patched_object_is_not_removed(
    remote: BareRemote, make: Callable[..., WorkerHarness], kbin: Path
) -> None:
    web = deployment("web", "nginx:1.25", 1)
    web["metadata"] = {"name": "web", "namespace": NS}
    patch: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
    }
    patch["metadata"]["namespace"] = NS
    patch["spec"] = {"replicas": 3}
    files = {
        "kustomization.yaml": PATCHED_KUSTOMIZATION,
        "web.yaml": dump_yaml(order_document(web)),
        "a-patch.yaml": dump_yaml(order_document(patch)),  # sorts first: looks like `web`
    }
    for name, content in files.items():
        remote.commit_foreign(f"{FOLDER}/{name}", content, name)
    tip = remote.tip()
    h = make(target(PruneMode.ALWAYS, folder=FOLDER, kustomize=KustomizeConfig()))
    await h.settle(change(None, DEPLOYMENTS, "web", Operation.DELETE))
    assert remote.tip() == tip  # neither the patch nor the patched file is removed
    (identity, reason, message), *_ = h.last().failing
    assert (identity.name, reason) == ("web", KUSTOMIZE_UNSUPPORTED)
    assert message == (
        f"not removed: patches in {FOLDER}/kustomization.yaml targets it (remove the patch first)"
    )
    kustomize.build_remote(kbin, remote.path, FOLDER)

    await h.settle(snapshot({}, ns=NS, rtype=DEPLOYMENTS))
    assert remote.tip() == tip
    assert [f[1] for f in h.last().failing] == [KUSTOMIZE_UNSUPPORTED]


async def test_a_document_of_a_multi_document_file_is_found_through_the_namespace(
    remote: BareRemote, make: Callable[..., WorkerHarness], kbin: Path
) -> None:
    both = "\n---\n".join(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}})
        for n in ("one", "two")
    )
    remote.commit_foreign(
        f"{FOLDER}/kustomization.yaml", "namespace: prod\nresources: [both.yaml]\n", "k"
    )
    remote.commit_foreign(f"{FOLDER}/both.yaml", both, "two in one file")
    h = make(target(PruneMode.NEVER, folder=FOLDER, kustomize=KustomizeConfig()))
    doc = configmap("two", k="1")
    doc["metadata"]["namespace"] = "prod"
    item = Change(
        TARGET,
        Operation.UPDATE,
        Identity("", "ConfigMap", "prod", "two"),
        CONFIGMAPS,
        doc,
        time.monotonic(),
        cursor(),
    )
    await h.settle(item)
    assert h.last().failing == []
    assert remote.files() == sorted([f"{FOLDER}/kustomization.yaml", f"{FOLDER}/both.yaml"])
    first, second = remote.read(f"{FOLDER}/both.yaml").split("\n---\n")
    assert first + "\n" == both.split("\n---\n")[0] + "\n"
    assert yaml.safe_load(second) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "two"},  # the kustomization sets the namespace
        "data": {"k": "1"},
    }
    kustomize.build_remote(kbin, remote.path, FOLDER)


async def test_a_folder_root_written_through_and_then_deleted_holds_the_target(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    """A root `.` the worker wrote through, deleted by a repository writer: the target is held
    (nothing written, no plain file), and written through again once the root is back."""
    root = f"{FOLDER}/kustomization.yaml"
    remote.commit_foreign(root, "resources: []\n", "root")
    h = make(target(PruneMode.ALWAYS, folder=FOLDER, kustomize=KustomizeConfig()))
    first = configmap("first", a="1")
    await h.settle(change(first, CONFIGMAPS, "first", Operation.CREATE))
    assert "first.yaml" in remote.read(root)
    assert h.last().held == ""

    remote.remove_foreign(root, "no more kustomization")
    gone = remote.tip()
    await h.settle(change(configmap("second", b="2"), CONFIGMAPS, "second", Operation.CREATE))
    assert h.last().held.startswith(f"{FOLDER} holds no kustomization.yaml")
    assert remote.tip() == gone
    assert not [f for f in remote.files() if f.endswith("second.yaml")]

    remote.commit_foreign(root, "resources: []\n", "the root is back")
    await h.settle(change(configmap("third", c="3"), CONFIGMAPS, "third", Operation.CREATE))
    assert h.last().held == ""
    assert "third.yaml" in remote.read(root)


async def test_a_named_root_that_is_missing_writes_nothing(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(kz_target())  # overlays/prod was never there
    await h.settle(change(configmap("app", a="1"), CONFIGMAPS, "app", Operation.CREATE))
    assert h.last().held.startswith(f"{FOLDER}/overlays/prod holds no kustomization.yaml")
    assert not [f for f in remote.files() if f.endswith("app.yaml")]
