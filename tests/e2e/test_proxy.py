"""`kubescribe run` with `HTTPS_PROXY` in its environment, as the chart's `proxy:` values set it:
the probe and the pushes go through a real proxy (tinyproxy on loopback) to the HTTPS git
server, the API server is never reached through it, and a proxy that does not answer is what
the GitProvider's status says, without the proxy's password."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from kubescribe_devenv.controlplane import ControlPlane, free_port
from kubescribe_devenv.httpgit import HttpsGitServer
from kubescribe_devenv.proxy import TinyProxy, tinyproxy_binary
from tests.manifests import CM_RULE, PASSWORD, cm_path, https_secret, provider, target, watch_rule
from tests.support import Operator, manifest, wait_condition, wait_for

pytestmark = pytest.mark.controlplane

_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyProxy]:
    if tinyproxy_binary() is None:
        pytest.skip("tinyproxy is not installed")
    with TinyProxy(tmp_path_factory.mktemp("tinyproxy")) as server:
        yield server


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


def _mirror(cp: ControlPlane, ns: str, server: HttpsGitServer, repo_name: str) -> None:
    cp.apply(manifest(https_secret("git-creds", ns, server, "writer", PASSWORD)))
    cp.apply(
        manifest(
            provider("git", ns, server.url_for(repo_name), secretRef={"name": "git-creds"}),
            target("mirror", ns, "git", "mirror"),
            watch_rule("rule", ns, "mirror", CM_RULE),
        )
    )


def test_probe_and_pushes_go_through_the_proxy_and_the_api_server_does_not(
    crds: ControlPlane,
    namespace: str,
    https_server: HttpsGitServer,
    proxy: TinyProxy,
    operator: Callable[..., Operator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cp, ns = crds, namespace
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    repo = https_server.create_repo(f"{ns}-proxied")
    before = len(proxy.requests())
    operator()
    _mirror(cp, ns, https_server, repo.path.name)
    cp.kubectl("create", "configmap", "via-proxy", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: cm_path(ns, "via-proxy") in repo.files(), timeout=60, what="file via proxy")
    wait_condition(cp, "gitprovider", "git", ns, "Readable", "True")
    wait_condition(cp, "gitprovider", "git", ns, "Writable", "True")
    taken = proxy.requests()[before:]
    # The read and push probes and the worker's transfers; never the API server (its client
    # does not read the proxy variables). GitProviders other tests left on the shared control
    # plane may tunnel to their own (unreachable) hosts too.
    ours = [r for r in taken if r == ("CONNECT", f"127.0.0.1:{https_server.port}")]
    assert len(ours) >= 3, taken
    api_server = cp.server.split("://", 1)[1]
    assert all(r[0] == "CONNECT" and r[1] != api_server for r in taken), taken


def test_a_proxy_that_does_not_answer_is_the_providers_status(
    crds: ControlPlane,
    namespace: str,
    https_server: HttpsGitServer,
    operator: Callable[..., Operator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cp, ns = crds, namespace
    dead = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("https_proxy", f"http://proxy-user:hunter2-proxy@{dead}")
    repo = https_server.create_repo(f"{ns}-dead-proxy")
    op = operator()
    _mirror(cp, ns, https_server, repo.path.name)
    readable = wait_condition(cp, "gitprovider", "git", ns, "Readable", "False", "ProxyUnreachable")
    assert f"the proxy http://{dead} does not answer" in readable["message"]
    cp.kubectl("create", "configmap", "held", "-n", ns, "--from-literal=a=1")
    pushed = wait_condition(cp, "gittarget", "mirror", ns, "Pushed", "False", "ProxyUnreachable")
    for text in (readable["message"], pushed["message"], op.logs()):
        assert "hunter2-proxy" not in text
        assert "proxy-user" not in text
