"""Credentials that change, against a real kube-apiserver: an exec plugin's token replaced
before it expires and after a 401, and a token file rewritten in place. Identities are
ServiceAccount tokens bound to a Secret, so the test revokes one by deleting its Secret.
Who the client is comes from a SelfSubjectReview, as the API server sees each request.

No waiting on the clock: the exec plugin's clock is the test's, so "nine tenths of the token's
life" is a step, not a sleep."""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from kubescribe.kube import config
from kubescribe.kube.client import KubeClient
from kubescribe.kube.credentials import ExecPlugin
from kubescribe_devenv.controlplane import ControlPlane
from tests.support import wait_for

PLUGIN = """import json, sys
state = json.load(open(sys.argv[1]))
state["runs"] += 1
json.dump(state, open(sys.argv[1], "w"))
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": state["token"], "expirationTimestamp": state["expiry"]}}))
"""
LIFE = 600  # seconds: the shortest token the TokenRequest API issues


def bound_token(cp: ControlPlane, namespace: str, account: str) -> str:
    """A token of ServiceAccount `account`, valid as long as the Secret `bind-<account>` lives."""
    cp.kubectl("-n", namespace, "create", "serviceaccount", account)
    cp.kubectl("-n", namespace, "create", "secret", "generic", f"bind-{account}")
    return cp.kubectl(
        "-n",
        namespace,
        "create",
        "token",
        account,
        "--bound-object-kind=Secret",
        f"--bound-object-name=bind-{account}",
        f"--duration={LIFE}s",
    ).stdout.strip()


def revoke(cp: ControlPlane, namespace: str, account: str, token: str) -> None:
    cp.kubectl("-n", namespace, "delete", "secret", f"bind-{account}")
    wait_for(lambda: status_with(cp, token) == 401, what=f"{account}'s token refused")


def status_with(cp: ControlPlane, token: str) -> int:
    """The API server's answer to a bare request with `token`."""
    ctx = ssl.create_default_context(cadata=cp.ca.cert_pem.decode())
    req = urllib.request.Request(f"{cp.server}/api", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


async def whoami(client: KubeClient) -> str:
    review = await client.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    name: str = review["status"]["userInfo"]["username"]
    return name.rpartition(":")[2]


def kubeconfig(cp: ControlPlane, path: Path, user: dict[str, Any]) -> Path:
    path.write_text(
        json.dumps(
            {
                "clusters": [
                    {
                        "name": "cp",
                        "cluster": {
                            "server": cp.server,
                            "certificate-authority-data": base64.b64encode(cp.ca.cert_pem).decode(),
                        },
                    }
                ],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "cp", "context": {"cluster": "cp", "user": "u"}}],
                "current-context": "cp",
            }
        )
    )
    return path


def iso(when: float) -> str:
    return dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_exec_plugin_token_is_replaced_before_expiry_and_after_a_401(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = controlplane
    first, second, third = (bound_token(cp, namespace, a) for a in ("first", "second", "third"))
    (tmp_path / "plugin.py").write_text(PLUGIN)
    state = tmp_path / "state.json"
    issued = dt.datetime.now(dt.UTC).timestamp()
    state.write_text(json.dumps({"runs": 0, "token": first, "expiry": iso(issued + LIFE)}))
    exec_spec = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(tmp_path / "plugin.py"), str(state)],
    }
    connection = config.resolve(kubeconfig(cp, tmp_path / "kc", {"exec": exec_spec}))
    plugin = connection.credentials
    assert isinstance(plugin, ExecPlugin)
    now = [issued]
    plugin.clock = lambda: now[0]
    client = KubeClient(connection)
    try:
        assert await whoami(client) == "first"
        assert await whoami(client) == "first"
        assert json.loads(state.read_text())["runs"] == 1

        # Nine tenths of the first token's life: the plugin runs again and its new token is
        # in use while the first one still works.
        state.write_text(json.dumps({"runs": 1, "token": second, "expiry": iso(issued + 2 * LIFE)}))
        now[0] = issued + LIFE * 0.9 - 1
        assert await whoami(client) == "first"
        now[0] = issued + LIFE * 0.9
        assert await whoami(client) == "second"
        assert status_with(cp, first) == 200  # switched before the old one stopped working
        revoke(cp, namespace, "first", first)
        assert await whoami(client) == "second"
        assert json.loads(state.read_text())["runs"] == 2

        # A token revoked before its time: the 401 makes the plugin run once more, and the
        # request is answered with the new token.
        state.write_text(json.dumps({"runs": 2, "token": third, "expiry": iso(issued + 2 * LIFE)}))
        revoke(cp, namespace, "second", second)
        assert await whoami(client) == "third"
        assert json.loads(state.read_text())["runs"] == 3
    finally:
        await client.close()


async def test_token_file_rewritten_in_place_is_used_at_the_next_request(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = controlplane
    first, second = (bound_token(cp, namespace, a) for a in ("first", "second"))
    token_file = tmp_path / "token"
    token_file.write_text(first)
    client = await KubeClient.connect(kubeconfig(cp, tmp_path / "kc", {"tokenFile": "token"}), None)
    try:
        assert await whoami(client) == "first"
        token_file.write_text(second + "\n")
        assert await whoami(client) == "second"
        assert status_with(cp, first) == 200  # picked up before the old one stopped working
        revoke(cp, namespace, "first", first)
        assert await whoami(client) == "second"
    finally:
        await client.close()
