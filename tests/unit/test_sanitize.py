import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kubescribe.mirror.sanitize import RUNTIME_FIELDS, sanitize

SERVER_METADATA = {
    "uid": "0b7c6a4e-1111-2222-3333-444455556666",
    "resourceVersion": "12345",
    "generation": 3,
    "creationTimestamp": "2024-01-01T00:00:00Z",
    "managedFields": [{"manager": "kubectl", "operation": "Update"}],
    "selfLink": "/api/v1/x",
}


def meta(name: str, namespace: str | None = "default", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, **SERVER_METADATA, **extra}
    if namespace is not None:
        out["namespace"] = namespace
    return out


def check(obj: dict[str, Any]) -> dict[str, Any]:
    """sanitize, asserting the invariants every call must keep."""
    before = copy.deepcopy(obj)
    out = sanitize(obj)
    assert obj == before
    assert sanitize(out) == out
    return out


def test_deployment() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(
            "web",
            labels={"app": "web"},
            annotations={
                "deployment.kubernetes.io/revision": "4",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "meta.helm.sh/release-name": "web",
                "team": "a",
            },
            finalizers=["example.com/keep"],
        ),
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.25", "args": []}]},
            },
        },
        "status": {"replicas": 2, "readyReplicas": 2},
    }
    assert check(deployment) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web"},
            "annotations": {"meta.helm.sh/release-name": "web", "team": "a"},
            "finalizers": ["example.com/keep"],
        },
        "spec": deployment["spec"],
    }


def test_owner_references_and_generate_name() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(
            "web-5d9c-abcde",
            generateName="web-5d9c-",
            ownerReferences=[{"kind": "ReplicaSet", "name": "web-5d9c", "uid": "x"}],
        ),
    }
    assert check(pod)["metadata"] == {"name": "web-5d9c-abcde", "namespace": "default"}
    unnamed = {"kind": "Pod", "metadata": {"generateName": "web-"}}
    assert check(unnamed) == unnamed


def test_service_with_cluster_ip() -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta("web"),
        "spec": {
            "type": "LoadBalancer",
            "clusterIP": "10.96.0.12",
            "clusterIPs": ["10.96.0.12"],
            "healthCheckNodePort": 31000,
            "externalTrafficPolicy": "Local",
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}],
            "selector": {"app": "web"},
        },
        "status": {"loadBalancer": {}},
    }
    assert check(service)["spec"] == {
        "type": "LoadBalancer",
        "externalTrafficPolicy": "Local",
        "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}],
        "selector": {"app": "web"},
    }
    assert "status" not in check(service)


def test_headless_service_keeps_cluster_ip_none() -> None:
    spec = {"clusterIP": "None", "clusterIPs": ["None"], "selector": {"app": "db"}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta("db"), "spec": spec}
    assert check(service)["spec"] == spec


def test_pvc_bound_by_controller() -> None:
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(
            "data",
            annotations={
                "pv.kubernetes.io/bind-completed": "yes",
                "pv.kubernetes.io/bound-by-controller": "yes",
                "volume.beta.kubernetes.io/storage-provisioner": "rancher.io/local-path",
                "volume.kubernetes.io/storage-provisioner": "rancher.io/local-path",
                "volume.kubernetes.io/selected-node": "node-1",
            },
            finalizers=["kubernetes.io/pvc-protection"],
        ),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "local-path",
            "volumeMode": "Filesystem",
            "volumeName": "pvc-0b7c6a4e",
        },
        "status": {"phase": "Bound"},
    }
    assert check(pvc) == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "data",
            "namespace": "default",
            "finalizers": ["kubernetes.io/pvc-protection"],
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "local-path",
            "volumeMode": "Filesystem",
        },
    }


def test_pvc_pre_bound_by_user_keeps_volume_name() -> None:
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta("data", annotations={"pv.kubernetes.io/bind-completed": "yes"}),
        "spec": {"volumeName": "static-pv", "storageClassName": ""},
    }
    out = check(pvc)
    assert out["spec"] == {"volumeName": "static-pv", "storageClassName": ""}
    assert "annotations" not in out["metadata"]


def test_persistent_volume_claim_ref() -> None:
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": meta(
            "pvc-0b7c6a4e",
            namespace=None,
            annotations={"pv.kubernetes.io/provisioned-by": "rancher.io/local-path"},
        ),
        "spec": {
            "capacity": {"storage": "1Gi"},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "name": "data",
                "namespace": "default",
                "uid": "u",
                "resourceVersion": "7",
            },
            "hostPath": {"path": "/data", "type": ""},
        },
    }
    out = check(pv)
    assert out["metadata"] == {"name": "pvc-0b7c6a4e"}
    assert out["spec"]["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "name": "data",
        "namespace": "default",
    }
    assert out["spec"]["hostPath"] == {"path": "/data", "type": ""}


def test_configmap_keeps_immutable_and_empty_data() -> None:
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta("settings", labels={}),
        "data": {},
        "binaryData": {"blob": ""},
        "immutable": True,
    }
    assert check(configmap) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default"},
        "data": {},
        "binaryData": {"blob": ""},
        "immutable": True,
    }


def test_storage_class_keeps_top_level_fields() -> None:
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": meta("fast", namespace=None),
        "provisioner": "ebs.csi.aws.com",
        "parameters": {"type": "gp3"},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }
    expected = {**storage_class, "metadata": {"name": "fast"}}
    assert check(storage_class) == expected


def test_pod_with_empty_dir_and_node_name() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta("debug"),
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "sh", "image": "busybox", "command": [""]}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
        "status": {"phase": "Running"},
    }
    assert check(pod)["spec"] == {
        "containers": [{"name": "sh", "image": "busybox", "command": [""]}],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
    }


def test_custom_resource_keeps_unknown_fields() -> None:
    custom = {
        "apiVersion": "example.com/v1alpha1",
        "kind": "Widget",
        "metadata": meta("w", annotations={"example.com/note": ""}),
        "spec": {"size": 3, "nodeName": "kept-here", "clusterIP": "kept-too", "extra": {}},
        "data": None,
        "status": {"ready": True},
    }
    out = check(custom)
    assert out == {
        "apiVersion": "example.com/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default", "annotations": {"example.com/note": ""}},
        "spec": {"size": 3, "nodeName": "kept-here", "clusterIP": "kept-too", "extra": {}},
        "data": None,
    }


def test_service_account_token_secrets() -> None:
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta("builder"),
        "secrets": [{"name": "builder-token-x7k2p"}, {"name": "registry-creds"}],
        "imagePullSecrets": [{"name": "builder-token-x7k2p"}],
    }
    out = check(account)
    assert out["secrets"] == [{"name": "registry-creds"}]
    assert out["imagePullSecrets"] == [{"name": "builder-token-x7k2p"}]
    only_token = {**account, "secrets": [{"name": "builder-token-x7k2p"}]}
    assert "secrets" not in check(only_token)
    assert check({**account, "secrets": []})["secrets"] == []


def test_job_generated_selector() -> None:
    uid = "9f6b5f0a-aaaa-bbbb-cccc-ddddeeeeffff"
    generated = {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid}
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta("migrate", labels={"app": "db", **generated}),
        "spec": {
            "backoffLimit": 2,
            "selector": {"matchLabels": {**generated}},
            "template": {
                "metadata": {"labels": {**generated, "job-name": "migrate"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "m"}]},
            },
        },
    }
    assert check(job)["metadata"]["labels"] == {"app": "db"}
    assert check(job)["spec"] == {
        "backoffLimit": 2,
        "template": {
            "metadata": {"labels": {"job-name": "migrate"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "m"}]},
        },
    }
    only_generated = copy.deepcopy(job)
    only_generated["spec"]["template"]["metadata"]["labels"] = {**generated}
    assert "metadata" not in check(only_generated)["spec"]["template"]


def test_job_manual_selector_is_kept() -> None:
    spec = {
        "manualSelector": True,
        "selector": {"matchLabels": {"controller-uid": "mine"}},
        "template": {"metadata": {"labels": {"controller-uid": "mine"}}},
    }
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("j"), "spec": spec}
    assert check(job)["spec"] == spec


def test_namespace_finalizers() -> None:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": meta("team-a", namespace=None, labels={"kubernetes.io/metadata.name": "x"}),
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
    assert check(namespace) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "x"}},
    }
    extra = {**namespace, "spec": {"finalizers": ["kubernetes", "example.com/x"]}}
    assert check(extra)["spec"] == {"finalizers": ["kubernetes", "example.com/x"]}


def test_kind_in_another_group_is_untouched() -> None:
    doc = {"apiVersion": "example.com/v1", "kind": "Service", "spec": {"clusterIP": "1.2.3.4"}}
    assert check(doc) == doc


def test_hpa_status_annotations() -> None:
    hpa = {
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": meta(
            "web",
            annotations={
                "autoscaling.alpha.kubernetes.io/conditions": "[]",
                "autoscaling.alpha.kubernetes.io/current-metrics": "[]",
                "autoscaling.alpha.kubernetes.io/metrics": "[]",
            },
        ),
    }
    assert check(hpa)["metadata"]["annotations"] == {
        "autoscaling.alpha.kubernetes.io/metrics": "[]"
    }


# Property tests: random documents of the kinds sanitize knows, with random runtime fields.

keys = st.sampled_from(
    [
        "spec",
        "status",
        "metadata",
        "labels",
        "annotations",
        "template",
        "selector",
        "matchLabels",
        "clusterIP",
        "clusterIPs",
        "nodeName",
        "volumeName",
        "claimRef",
        "uid",
        "resourceVersion",
        "finalizers",
        "manualSelector",
        "secrets",
        "name",
        "generateName",
        "controller-uid",
        "batch.kubernetes.io/controller-uid",
        "pv.kubernetes.io/bound-by-controller",
        "other",
    ]
)
scalars = st.one_of(
    st.sampled_from(["", "None", "kubernetes", "yes", "sa-token-1", "x"]),
    st.booleans(),
    st.integers(),
    st.none(),
)
trees = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(keys, children, max_size=4)
    ),
    max_leaves=25,
)
kinds = st.sampled_from([*RUNTIME_FIELDS, ("", "ConfigMap"), ("example.com", "Widget")])


runtime_values = st.one_of(
    trees,
    st.just(["kubernetes"]),
    st.lists(st.fixed_dictionaries({"name": st.sampled_from(["sa-token-1", "sa-x"])})),
)


def put(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        if not isinstance(doc.get(key), dict):
            doc[key] = {}
        doc = doc[key]
    doc[path[-1]] = value


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """Documents of the kinds sanitize knows, with their runtime fields often present."""
    group, kind = draw(kinds)
    doc: dict[str, Any] = draw(st.dictionaries(keys, trees, max_size=4))
    doc["apiVersion"] = f"{group}/v1" if group else "v1"
    doc["kind"] = kind
    for strip in RUNTIME_FIELDS.get((group, kind), ()):
        if draw(st.booleans()):
            put(doc, strip.path, draw(runtime_values))
    if draw(st.booleans()):
        put(doc, ("spec", "manualSelector"), draw(st.sampled_from([True, False, "true"])))
    if draw(st.booleans()):
        metadata = draw(st.dictionaries(keys, trees, max_size=4))
        metadata["name"] = draw(st.sampled_from(["sa", "", None]))
        doc["metadata"] = metadata
        if draw(st.booleans()):
            put(doc, ("metadata", "annotations", "pv.kubernetes.io/bound-by-controller"), "yes")
    return doc


@settings(max_examples=500)
@given(documents())
def test_sanitize_is_idempotent_and_pure(doc: dict[str, Any]) -> None:
    out = check(doc)
    assert "status" not in out
    assert out.get("apiVersion") == doc["apiVersion"]
