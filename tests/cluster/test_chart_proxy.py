"""The chart's `proxy:` values become the container's HTTPS_PROXY, HTTP_PROXY and NO_PROXY
(needs the cached helm)."""

from __future__ import annotations

import pytest

from kubescribe_devenv.cluster import ClusterTools
from tests.cluster.test_chart import render
from tests.cluster.test_chart_values import objects, pod_spec

pytestmark = pytest.mark.cluster
PROXY_VARS = {"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"}


def _env(tools: ClusterTools, *values: str) -> list[dict[str, str]]:
    [container] = pod_spec(objects(tools, *values))["containers"]
    env: list[dict[str, str]] = container["env"]
    return env


def test_no_proxy_variables_by_default(tools: ClusterTools) -> None:
    assert not {e["name"] for e in _env(tools)} & PROXY_VARS


def test_proxy_values_set_the_variables_before_extra_env(tools: ClusterTools) -> None:
    env = _env(
        tools,
        "--set=proxy.httpsProxy=http://proxy.corp.example:3128",
        "--set=proxy.httpProxy=proxy.corp.example:3128",
        "--set=proxy.noProxy=.svc\\,.cluster.local\\,10.0.0.0/8",
        "--set=extraEnv[0].name=A",
        "--set=extraEnv[0].value=b",
    )
    proxy = [e for e in env if e["name"] in PROXY_VARS]
    assert proxy == [
        {"name": "HTTPS_PROXY", "value": "http://proxy.corp.example:3128"},
        {"name": "HTTP_PROXY", "value": "proxy.corp.example:3128"},
        {"name": "NO_PROXY", "value": ".svc,.cluster.local,10.0.0.0/8"},
    ]
    assert env[-1] == {"name": "A", "value": "b"}


def test_only_the_values_set_become_variables(tools: ClusterTools) -> None:
    env = _env(tools, "--set=proxy.httpsProxy=http://proxy:3128")
    assert [e["name"] for e in env if e["name"] in PROXY_VARS] == ["HTTPS_PROXY"]


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("--set=proxy.httpsProxy=socks5://proxy:1080", "/proxy/httpsProxy"),
        ("--set=proxy.httpProxy=http://proxy:3128/path", "/proxy/httpProxy"),
        ("--set=proxy.https=http://proxy:3128", "/proxy"),
    ],
)
def test_an_unusable_proxy_value_is_refused_by_the_schema(
    tools: ClusterTools, value: str, path: str
) -> None:
    done = render(tools, value)
    assert done.returncode != 0
    assert "schema" in done.stderr, done.stderr
    assert f"'{path}'" in done.stderr or f"'{path}/" in done.stderr, done.stderr
