"""The history as a product, end to end: a control plane whose audit webhook names the actors,
the operator mirroring into a real Git remote, and `kubescribe history | blame | show | diff |
restore` (and `kubectl scribe`) run as a user runs them."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubescribe.mirror.yamlfmt import load_yaml
from kubescribe.secrets.age import parse_identities
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.e2e.conftest import MASTERS, Audited
from tests.manifests import CM_RULE, provider, string_secret, target, watch_rule
from tests.support import Operator, manifest, metric, wait_for, wait_ready

pytestmark = pytest.mark.controlplane

DEPLOYMENTS = {"apiGroups": ["apps"], "resources": ["deployments"]}
SECRETS = {"apiGroups": [""], "resources": ["secrets"]}
CANARY = "canary-41f0c2d9-plaintext"


def scribe(
    cp: ControlPlane, cache: Path, *args: str, check: bool = True, kubectl: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run `kubescribe ARGS` (or `kubectl scribe ARGS` through the real kubectl, the plugin on
    PATH) as the control plane's admin, with its own cache."""
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig), "XDG_CACHE_HOME": str(cache)}
    env.pop("SOPS_AGE_KEY_FILE", None)
    env.pop("SOPS_AGE_KEY", None)
    if kubectl:
        assert cp.bin_dir is not None
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        argv = [str(cp.bin_dir / "kubectl"), "scribe", *args]
    else:
        argv = [sys.executable, "-m", "kubescribe", *args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def deployment(ns: str, replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }


def row(text: str, first: str) -> str:
    [line] = [line for line in text.splitlines() if line.split()[:1] == [first]]
    return line


def test_who_changed_it_what_it_was_and_giving_it_back(
    audited: Audited,
    ns: str,
    remote: BareRemote,
    start_operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp = audited.cp
    op = start_operator(*audited.flags())
    cp.apply(
        manifest(
            provider("git", ns, remote.url, attribution={"mode": "attributed-author"}),
            target("mirror", ns, "git", "mirror"),
            watch_rule("rule", ns, "mirror", DEPLOYMENTS, CM_RULE),
        )
    )
    wait_ready(cp, ns)
    cp.kubectl("create", "configmap", "warmup", "-n", ns)
    wait_for(
        lambda: metric(op, "kubescribe_audit_requests_total", 'code="200"') > 0,
        timeout=60,
        what="audit batches accepted by the operator",
    )
    web = f"mirror/{ns}/apps/deployments/web.yaml"
    cp.kubectl("create", "-f", "-", "--as", "alice", *MASTERS, input=json.dumps(deployment(ns)))
    wait_for(lambda: web in remote.files(), timeout=60, what="alice's Deployment")
    created = remote.tip()
    audited.kubectl_as("bob", "scale", "deployment", "web", "-n", ns, "--replicas=3")
    wait_for(lambda: "replicas: 3" in remote.read(web), timeout=60, what="bob's scale")
    scaled = remote.tip()
    audited.kubectl_as("carol", "delete", "deployment", "web", "-n", ns)
    wait_for(lambda: web not in remote.files(), timeout=60, what="carol's delete")

    cache = tmp_path / "cache"
    source = ("--repo", str(remote.path), "--path", "mirror")
    out = scribe(cp, cache, "history", "deployment/web", "-n", ns, *source, "-o", "json").stdout
    changes = [(c["author"], c["source"], c["operation"]) for c in json.loads(out)]
    assert changes == [
        ("carol", "audit", "DELETE"),
        ("bob", "audit", "UPDATE"),
        ("alice", "audit", "CREATE"),
    ]
    table = scribe(cp, cache, "history", "deploy/web", "-n", ns, *source).stdout
    [by_bob] = [line for line in table.splitlines() if "bob (audit)" in line]
    assert "spec.replicas 2→3" in by_bob

    blamed = scribe(cp, cache, "blame", "deployment/web", "-n", ns, *source).stdout
    assert "bob (audit)" in row(blamed, "spec.replicas")
    assert "alice (audit)" in row(blamed, "spec.template.spec.containers[web].image")

    assert created is not None
    assert scaled is not None
    before = scribe(cp, cache, "show", "deployment/web", "-n", ns, "--at", created, *source)
    assert load_yaml(before.stdout)["spec"]["replicas"] == 2

    # The version before the delete, given back: the next mirror commit records it.
    preview = scribe(cp, cache, "restore", "deployment/web", "-n", ns, "--at", scaled, *source)
    assert "not applied" in preview.stdout
    assert cp.kubectl("get", "deployment", "web", "-n", ns, check=False).returncode != 0
    scribe(cp, cache, "restore", "deployment/web", "-n", ns, "--at", scaled, "--yes", *source)
    live = cp.get_json("deployment", "web", "-n", ns)
    assert live["spec"]["replicas"] == 3
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"
    wait_for(lambda: web in remote.files(), timeout=60, what="the restore mirrored")
    restored = load_yaml(remote.read(web))
    assert restored["spec"]["replicas"] == 3
    assert restored["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"
    newest = json.loads(
        scribe(cp, cache, "history", "deployment/web", "-n", ns, *source, "-o", "json").stdout
    )[0]
    assert newest["operation"] == "CREATE"
    assert newest["commit"] == remote.tip()
    in_sync = scribe(cp, cache, "diff", "deployment/web", "-n", ns, "--to", "live", *source)
    assert "no difference" in in_sync.stdout

    # Drift: a change while the operator is stopped shows against live.
    op.stop()
    cp.kubectl("scale", "deployment", "web", "-n", ns, "--replicas=5")
    drift = scribe(cp, cache, "diff", "deployment/web", "-n", ns, "--to", "live", *source).stdout
    assert "~ spec.replicas: 3 → 5" in drift
    assert "-  replicas: 3\n+  replicas: 5" in drift

    # The same history through kubectl, the GitTarget naming the repository.
    plugin = scribe(
        cp, cache, "history", "deployment/web", "-n", ns, "--target", f"{ns}/mirror",
        kubectl=True,
    )  # fmt: skip
    assert "carol (audit)" in plugin.stdout
    assert "bob (audit)" in plugin.stdout


def test_a_secret_is_restored_with_the_age_identity_and_refused_without(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    operator()
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target(
                "mirror",
                ns,
                "git",
                "mirror",
                encryption={"ageKeySecretRef": {"name": "age-key"}, "generateWhenMissing": True},
            ),
            watch_rule("rule", ns, "mirror", SECRETS),
        )
    )
    cp.apply(manifest(string_secret("db", ns, user="app", password=CANARY)))
    path = f"mirror/{ns}/core/secrets/db.sops.yaml"
    wait_for(lambda: path in remote.files(), timeout=60, what="the encrypted Secret")
    written = remote.tip()
    assert written is not None
    generated = cp.get_json("secret", "age-key", "-n", ns)
    key_file = tmp_path / "key.txt"
    key_file.write_text(base64.b64decode(generated["data"]["identity.agekey"]).decode())
    assert parse_identities(key_file.read_text())
    cp.kubectl("delete", "secret", "db", "-n", ns)
    wait_for(lambda: path not in remote.files(), timeout=60, what="the delete mirrored")

    cache = tmp_path / "cache"
    source = ("--repo", str(remote.path), "--path", "mirror")
    for command in ("history", "blame"):
        shown = scribe(cp, cache, command, "secret/db", "-n", ns, *source).stdout
        assert CANARY not in shown
        assert base64.b64encode(CANARY.encode()).decode() not in shown
    refused = scribe(
        cp, cache, "restore", "secret/db", "-n", ns, "--at", written, "--yes", *source,
        check=False,
    )  # fmt: skip
    assert refused.returncode == 1
    assert refused.stderr.startswith("kubescribe: this version is SOPS-encrypted")
    assert "--age-identity" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert cp.kubectl("get", "secret", "db", "-n", ns, check=False).returncode != 0

    done = scribe(
        cp, cache, "restore", "secret/db", "-n", ns, "--at", written, "--yes",
        "--age-identity", str(key_file), *source,
    )  # fmt: skip
    assert CANARY not in done.stdout
    assert base64.b64encode(CANARY.encode()).decode() not in done.stdout
    data = cp.get_json("secret", "db", "-n", ns)["data"]
    assert base64.b64decode(data["password"]).decode() == CANARY
    assert base64.b64decode(data["user"]).decode() == "app"
