"""No spec value stops the plan: arbitrary GitProviders, GitTargets, (Cluster)WatchRules and
ClusterProviders, with arbitrary URLs, go through `compile_plan`, which never raises and gives
every object a plan of its own (valid, or a problem with a reason).

The specs start from valid shapes with fields replaced by arbitrary JSON values, so the
search reaches past schema validation into the URL policy, the one-writer key, templates,
paths, noise policies and rules; the API server's CRD schema is not assumed to hold.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubescribe.api import conditions as c
from kubescribe.controller.desired import compile_plan
from kubescribe.controller.plan import ReadQuestion, TenantReads
from kubescribe.kube.discovery import Discovered
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.identity import ResourceType
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY

TYPES = [
    Discovered(ResourceType("", "v1", "configmaps", "ConfigMap", True), True),
    Discovered(ResourceType("", "v1", "namespaces", "Namespace", False), True),
    Discovered(ResourceType("apps", "v1", "deployments", "Deployment", True), True),
]
NAMESPACES = ["ns", "other"]
NAMES = ["git", "t", "c1"]

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=8,
)
HOSTS = st.one_of(
    st.sampled_from(["github.com", "169.254.169.254", "localhost", "metadata", "h", "-o"]),
    st.ip_addresses().map(lambda a: f"[{a}]" if a.version == 6 else str(a)),
    st.text(min_size=1, max_size=20),
)
URLS = st.one_of(
    st.text(max_size=60),
    st.builds(
        lambda scheme, user, host, port, path: f"{scheme}://{user}{host}{port}/{path}",
        st.sampled_from(["https", "ssh", "http", "git", "file", "git+ssh", "HTTPS", "x"]),
        st.sampled_from(["", "git@", "u:p@", "@", ":@"]),
        HOSTS,
        st.sampled_from(["", ":22", ":0", ":99999", ":x", ":"]),
        st.text(max_size=20),
    ),
    st.builds(
        lambda user, host, path: f"{user}{host}:{path}",
        st.sampled_from(["", "git@", "a:b@", "[", "]@"]),
        HOSTS,
        st.text(max_size=20),
    ),
)


def _mutated(base: dict[str, Any], keys: list[str]) -> st.SearchStrategy[Any]:
    """`base` with some of `keys` set to arbitrary JSON, or an arbitrary value altogether."""
    changed = st.dictionaries(st.sampled_from(keys), JSON, max_size=3).map(
        lambda changes: {**base, **changes}
    )
    return st.one_of(st.just(base), changed, changed, JSON)


RULE = {"apiGroups": ["*"], "resources": ["*"]}
PROVIDER_SPECS = st.one_of(
    st.builds(lambda url: {"url": url}, URLS),
    _mutated(
        {"url": "https://git.example/r.git", "allowedBranches": ["*"]},
        ["url", "secretRef", "allowedBranches", "commit", "push", "signing", "attribution"],
    ),
)
TARGET_SPECS = st.one_of(
    _mutated(
        {"providerRef": {"name": "git"}, "branch": "main", "path": "a"},
        ["providerRef", "branch", "path", "placement", "noise", "content", "prune", "suspend"],
    ),
    st.builds(  # spec.commit: arbitrary windows and templates past the CRD's checks
        lambda window, change, group: {
            "providerRef": {"name": "git"},
            "branch": "main",
            "path": "a",
            "commit": {"commitWindow": window, "message": {"change": change, "group": group}},
        },
        st.one_of(st.text(max_size=12), st.from_regex(r"[0-9]{1,30}(ms|s|m|h)", fullmatch=True)),
        st.text(max_size=20),
        st.text(max_size=20),
    ),
)
RULE_SPECS = _mutated(
    {"targetRef": {"name": "t"}, "rules": [RULE]},
    ["targetRef", "rules", "clusterRef"],
)
CLUSTER_RULE_SPECS = _mutated(
    {"targetRef": {"name": "t", "namespace": "ns"}, "rules": [RULE]},
    ["targetRef", "rules", "clusterRef"],
)
CLUSTER_SPECS = _mutated(
    {"kubeconfigSecretRef": {"namespace": "ns", "name": "k"}, "allowedNamespaces": ["*"]},
    ["kubeconfigSecretRef", "allowedNamespaces", "context", "auditRoute", "qps", "burst"],
)


def objects(specs: st.SearchStrategy[Any], namespaced: bool = True) -> st.SearchStrategy[Any]:
    def build(spec: Any, ns: str, name: str, generation: Any, created: Any) -> dict[str, Any]:
        meta = {"name": name, "generation": generation, "creationTimestamp": created}
        return {"metadata": {**meta, "namespace": ns} if namespaced else meta, "spec": spec}

    one = st.builds(
        build,
        specs,
        st.sampled_from(NAMESPACES),
        st.sampled_from(NAMES),
        st.one_of(st.integers(min_value=0, max_value=2**40), JSON),
        st.one_of(st.just("2026-01-01T00:00:00Z"), JSON),
    )
    return st.lists(one, max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    providers=objects(PROVIDER_SPECS),
    targets=objects(TARGET_SPECS),
    rules=objects(RULE_SPECS),
    cluster_rules=objects(CLUSTER_RULE_SPECS, namespaced=False),
    clusters=objects(CLUSTER_SPECS, namespaced=False),
    allow_file_urls=st.booleans(),
    grants=st.sampled_from([None, {}, {"other": frozenset({"*"})}]),
    reads=st.sampled_from(
        [
            None,
            TenantReads("reader"),
            TenantReads("reader", {ReadQuestion("ns", "ns", "", "configmaps"): True}),
        ]
    ),
)
def test_compile_plan_never_raises_and_plans_every_object(
    providers: list[dict[str, Any]],
    targets: list[dict[str, Any]],
    rules: list[dict[str, Any]],
    cluster_rules: list[dict[str, Any]],
    clusters: list[dict[str, Any]],
    allow_file_urls: bool,
    grants: dict[str, frozenset[str]] | None,
    reads: TenantReads | None,
) -> None:
    plan = compile_plan(
        providers,
        targets,
        rules,
        cluster_rules,
        TYPES,
        DEFAULT_NOISE_POLICY,
        allow_file_urls=allow_file_urls,
        grants=grants,
        cluster_providers=clusters,
        remote_discovered={"c1": TYPES},
        reads=reads,
    )
    assert plan.failures == []  # the safety net is for bugs; none is known
    for o in providers:
        meta = o["metadata"]
        p = plan.providers[(meta["namespace"], meta["name"])]
        assert (p.problem is None) == bool(p.normalized_url)
    for o in targets:
        meta = o["metadata"]
        assert TargetKey(meta["namespace"], meta["name"]) in plan.targets
    for kind, objs in (("WatchRule", rules), ("ClusterWatchRule", cluster_rules)):
        for o in objs:
            meta = o["metadata"]
            assert (kind, (meta.get("namespace", ""), meta["name"])) in plan.rules
    assert {o["metadata"]["name"] for o in clusters} == set(plan.clusters)
    for problem in [p.problem for p in plan.providers.values()] + [
        t.problem for t in plan.targets.values()
    ]:
        assert problem is None or problem.reason in c.REASONS
