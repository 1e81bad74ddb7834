"""Owned content: the fields managedFields says someone wrote (pure)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kubescribe.mirror.owned import (
    CLIENT_SIDE_APPLY,
    LAST_APPLIED,
    Content,
    KeepField,
    keep_owned,
    owns,
)
from kubescribe.mirror.sanitize import sanitize

OWNED = Content("Owned", ("horizontal-pod-autoscaler", "kube-controller-manager"))


def entry(
    fields: dict[str, Any],
    manager: str = "kubectl",
    operation: str = "Apply",
    api_version: str = "apps/v1",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        "manager": manager,
        "operation": operation,
        "time": "2026-01-01T00:00:00Z",
        **extra,
    }


def deployment(*entries: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "uid": "u-1",
            "labels": {"app": "web", "team": "a"},
            "managedFields": list(entries),
        },
        "spec": {
            "replicas": 3,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            },
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "nginx:1.27",
                            "imagePullPolicy": "IfNotPresent",
                            "resources": {},
                            "terminationMessagePath": "/dev/termination-log",
                            "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        },
                        {"name": "side", "image": "busybox", "imagePullPolicy": "Always"},
                    ],
                    "dnsPolicy": "ClusterFirst",
                    "securityContext": {},
                },
            },
            **spec,
        },
        "status": {"replicas": 3},
    }


APPLIED: dict[str, Any] = {
    "f:metadata": {"f:labels": {"f:app": {}}},
    "f:spec": {
        "f:replicas": {},
        "f:selector": {},
        "f:template": {
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:containers": {
                    'k:{"name":"web"}': {
                        ".": {},
                        "f:image": {},
                        "f:name": {},
                        "f:ports": {
                            'k:{"containerPort":80,"protocol":"TCP"}': {
                                ".": {},
                                "f:containerPort": {},
                            }
                        },
                    }
                }
            },
        },
    },
}


def owned(obj: dict[str, Any], content: Content = OWNED) -> dict[str, Any]:
    before = copy.deepcopy(obj)
    kept = keep_owned(obj, content)
    assert obj == before
    assert kept.document is not None, kept.fallback
    return kept.document


def test_only_applied_fields_identity_and_merge_keys_are_kept() -> None:
    doc = owned(deployment(entry(APPLIED)))
    assert doc == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}
                    ]
                },
            },
        },
    }


def test_list_items_are_matched_by_merge_key_not_position() -> None:
    obj = deployment(entry(APPLIED))
    containers = obj["spec"]["template"]["spec"]["containers"]
    containers.reverse()  # the owned item is now second
    doc = owned(obj)
    assert [c["name"] for c in doc["spec"]["template"]["spec"]["containers"]] == ["web"]


def widget(fields: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {
            "name": "w",
            "managedFields": [entry(fields, api_version="example.com/v1")],
        },
        "spec": spec,
    }


def test_a_field_owned_whole_keeps_its_subtree() -> None:
    obj = widget({"f:spec": {"f:shape": {}}}, shape={"sides": [{"n": 1}], "a": {}}, b=1)
    assert owned(obj)["spec"] == {"shape": {"sides": [{"n": 1}], "a": {}}}


def test_server_defaults_inside_a_struct_written_empty_are_left_out() -> None:
    # `strategy: {}` applied: the server filled it in, nobody wrote what is inside
    doc = owned(deployment(entry({"f:spec": {"f:strategy": {}, "f:paused": {}}}), paused=False))
    assert doc["spec"] == {"paused": False}


def test_a_parent_owned_with_dot_keeps_only_owned_children() -> None:
    fields: dict[str, Any] = {"f:metadata": {"f:labels": {".": {}, "f:team": {}}}}
    assert owned(deployment(entry(fields)))["metadata"]["labels"] == {"team": "a"}


def test_an_empty_map_written_by_apply_is_kept() -> None:
    obj = deployment(entry({"f:metadata": {"f:annotations": {".": {}}}}))
    obj["metadata"]["annotations"] = {}
    assert owned(obj)["metadata"]["annotations"] == {}


def test_sets_are_matched_by_value() -> None:
    obj = deployment(entry({"f:metadata": {"f:finalizers": {".": {}, 'v:"example.com/keep"': {}}}}))
    obj["metadata"]["finalizers"] = ["kubernetes.io/other", "example.com/keep"]
    assert owned(obj)["metadata"]["finalizers"] == ["example.com/keep"]


def test_positional_items() -> None:
    obj = deployment(
        entry({"f:spec": {"f:template": {"f:spec": {"f:containers": {"i:1": {"f:image": {}}}}}}})
    )
    assert owned(obj)["spec"]["template"]["spec"]["containers"] == [{"image": "busybox"}]


def test_ownership_of_every_manager_is_merged() -> None:
    other = entry({"f:spec": {"f:paused": {}}}, manager="kubectl-patch", operation="Update")
    doc = owned(deployment(entry(APPLIED), other, paused=True))
    assert doc["spec"]["paused"] is True
    assert doc["spec"]["replicas"] == 3


def test_fields_only_controllers_own_are_left_out_unless_kept() -> None:
    scaled = entry(
        {"f:spec": {"f:replicas": {}}},
        manager="horizontal-pod-autoscaler",
        operation="Update",
        subresource="scale",
    )
    applied = {
        **APPLIED,
        "f:spec": {k: v for k, v in APPLIED["f:spec"].items() if k != "f:replicas"},
    }
    obj = deployment(entry(applied), scaled)
    assert "replicas" not in owned(obj)["spec"]
    assert owned(obj, Content("Owned"))["spec"]["replicas"] == 3  # no controllers listed
    keep = Content("Owned", OWNED.controllers, (KeepField(("spec", "replicas"), "apps"),))
    assert owned(obj, keep)["spec"]["replicas"] == 3
    # a field a person owns too stays
    assert owned(deployment(entry(APPLIED), scaled))["spec"]["replicas"] == 3


def test_keep_takes_defaulted_fields_through_lists() -> None:
    path = ("spec", "template", "spec", "containers", "*", "imagePullPolicy")
    keep = Content("Owned", (), (KeepField(path, kind="Deploy*"),))
    containers = owned(deployment(entry(APPLIED)), keep)["spec"]["template"]["spec"]["containers"]
    assert containers[0]["imagePullPolicy"] == "IfNotPresent"
    other_kind = Content("Owned", (), (KeepField(path, kind="StatefulSet"),))
    containers = owned(deployment(entry(APPLIED)), other_kind)["spec"]["template"]["spec"]
    assert "imagePullPolicy" not in containers["containers"][0]


CREATED = {
    "f:spec": {
        "f:replicas": {},
        "f:revisionHistoryLimit": {},
        "f:progressDeadlineSeconds": {},
        "f:selector": {},
        "f:strategy": {
            "f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}},
            "f:type": {},
        },
        "f:template": {
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:containers": {
                    'k:{"name":"web"}': {
                        ".": {},
                        "f:image": {},
                        "f:imagePullPolicy": {},
                        "f:name": {},
                        "f:resources": {},
                        "f:terminationMessagePath": {},
                        "f:ports": {
                            ".": {},
                            'k:{"containerPort":80,"protocol":"TCP"}': {
                                ".": {},
                                "f:containerPort": {},
                                "f:protocol": {},
                            },
                        },
                    }
                },
                "f:dnsPolicy": {},
                "f:securityContext": {},
            },
        },
    }
}


def test_defaults_an_update_recorded_as_owned_are_left_out() -> None:
    # kubectl create / client-side apply: the server defaults the object before it computes
    # what the Update owns.
    doc = owned(deployment(entry(CREATED, manager="kubectl-create", operation="Update")))
    assert doc["spec"] == {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}
                ]
            },
        },
    }


def test_a_default_value_an_apply_wrote_is_kept() -> None:
    fields: dict[str, Any] = {"f:spec": {"f:revisionHistoryLimit": {}}}
    assert owned(deployment(entry(fields)))["spec"] == {"revisionHistoryLimit": 10}


def test_a_conditional_default_is_left_out_only_when_it_holds() -> None:
    obj = deployment(entry(CREATED, manager="kubectl-create", operation="Update"))
    container = obj["spec"]["template"]["spec"]["containers"][0]
    container["image"] = "nginx"  # untagged: the default would be Always
    doc = owned(obj)
    assert doc["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"


def test_defaults_inside_an_atomic_value_are_left_out() -> None:
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": "r",
            "namespace": "n",
            "managedFields": [
                entry(
                    {"f:roleRef": {}, "f:subjects": {}},
                    api_version="rbac.authorization.k8s.io/v1",
                )
            ],
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [
            {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
            {"kind": "ServiceAccount", "name": "app", "namespace": "n"},
        ],
    }
    assert owned(binding)["subjects"] == [
        {"kind": "User", "name": "alice"},
        {"kind": "ServiceAccount", "name": "app", "namespace": "n"},
    ]


def test_custom_resources_keep_their_owned_fields() -> None:
    assert owned(widget({"f:spec": {"f:size": {}}}, size=3, color="blue")) == {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 3},
    }


@pytest.mark.parametrize(
    ("managed", "reason"),
    [
        (None, "missing"),
        ([], "missing"),
        ("x", "malformed"),
        (["x"], "malformed"),
        ([entry({"f:spec": "x"})], "malformed"),
        ([entry({"g:spec": {}})], "malformed"),
        (
            [entry({"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{bad": {}}}}}})],
            "malformed",
        ),
        (
            [entry({"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:[1]": {}}}}}})],
            "malformed",
        ),
        (
            [entry({"f:spec": {"f:template": {"f:spec": {"f:containers": {"i:x": {}}}}}})],
            "malformed",
        ),
        ([{**entry({}), "fieldsV1": None}], "malformed"),
        ([{**entry({}), "fieldsType": "FieldsV2"}], "unsupported-format"),
        ([entry({}, api_version="apps/v1beta2")], "version-mismatch"),
    ],
)
def test_unusable_managed_fields_fall_back_to_full(managed: Any, reason: str) -> None:
    obj = deployment()
    obj["metadata"]["managedFields"] = managed
    kept = keep_owned(obj, OWNED)
    assert (kept.document, kept.fallback) == (None, reason)


def test_status_entries_are_ignored() -> None:
    status = entry(
        {"f:status": {"f:replicas": {}}}, api_version="apps/v1beta2", subresource="status"
    )
    assert owned(deployment(entry(APPLIED), status))["spec"]["replicas"] == 3


def test_deep_nesting_falls_back() -> None:
    fields: dict[str, Any] = {}
    value: dict[str, Any] = {}
    f, v = fields, value
    for _ in range(5000):
        f["f:a"] = {}
        v["a"] = {}
        f, v = f["f:a"], v["a"]
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, **value}
    obj["metadata"]["managedFields"] = [entry(fields, api_version="v1")]
    assert keep_owned(obj, OWNED).document is None


def test_owned_then_sanitized_is_idempotent_and_json_clean() -> None:
    obj = deployment(entry(CREATED, manager="kubectl-create", operation="Update"))
    doc = sanitize(obj, keep_owned(obj, OWNED).document)
    assert "status" not in doc
    assert "uid" not in doc["metadata"]
    assert sanitize(doc) == doc
    json.dumps(doc)


def service(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s", "namespace": "n", "managedFields": list(entries)},
        "spec": {
            "type": "LoadBalancer",
            "healthCheckNodePort": 32001,
            "ports": [
                {"port": 80, "protocol": "TCP", "nodePort": 30080},
                {"port": 443, "protocol": "TCP", "nodePort": 30443},
            ],
        },
    }


def test_owns_reads_list_items_by_merge_key() -> None:
    fields: dict[str, Any] = {
        "f:spec": {
            "f:ports": {
                'k:{"port":443,"protocol":"TCP"}': {"f:nodePort": {}},
                'k:{"port":80,"protocol":"TCP"}': {"f:port": {}},
            }
        }
    }
    svc = service(entry(fields, api_version="v1"))
    ports = svc["spec"]["ports"]
    assert owns(svc, ("spec", "ports"), ports[1], "nodePort") is True
    assert owns(svc, ("spec", "ports"), ports[0], "nodePort") is False
    assert owns(svc, ("spec", "healthCheckNodePort")) is False
    assert owns(service(), ("spec", "healthCheckNodePort")) is None


def test_full_mode_drops_allocated_node_ports_only() -> None:
    fields: dict[str, Any] = {
        "f:spec": {"f:ports": {'k:{"port":443,"protocol":"TCP"}': {"f:nodePort": {}}}}
    }
    doc = sanitize(service(entry(fields, api_version="v1")))
    assert doc["spec"]["ports"] == [
        {"port": 80, "protocol": "TCP"},
        {"port": 443, "protocol": "TCP", "nodePort": 30443},
    ]
    assert "healthCheckNodePort" not in doc["spec"]
    # without managedFields nobody can tell: node ports stay, the health check port goes
    doc = sanitize(service())
    assert [p["nodePort"] for p in doc["spec"]["ports"]] == [30080, 30443]
    assert "healthCheckNodePort" not in doc["spec"]
    owned_port: dict[str, Any] = {"f:spec": {"f:healthCheckNodePort": {}}}
    assert sanitize(service(entry(owned_port, api_version="v1")))["spec"]["healthCheckNodePort"]


def test_client_side_apply_owns_what_its_last_manifest_holds() -> None:
    # kubectl apply (client-side) is an Update that owns the defaults of its create too; its
    # last-applied manifest says what it wrote, defaults equal to the server's included.
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "replicas": 3,
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}
                    ]
                },
            },
        },
    }
    fields = json.loads(json.dumps(CREATED))
    fields["f:metadata"] = {
        "f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}},
        "f:labels": {".": {}, "f:app": {}},
    }
    obj = deployment(entry(fields, manager="kubectl-client-side-apply", operation="Update"))
    obj["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(manifest)
    }
    doc = sanitize(obj, owned(obj))
    assert doc["spec"] == manifest["spec"]  # revisionHistoryLimit: 10 written, so kept
    assert doc["metadata"] == {"name": "web", "namespace": "shop", "labels": {"app": "web"}}
    # An unreadable manifest: an Update like any other (server defaults left out).
    obj["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{"}
    assert "revisionHistoryLimit" not in owned(obj)["spec"]


def test_a_client_side_apply_entry_that_does_not_parse_falls_back() -> None:
    bad = entry(
        {"f:spec": {"f:template": {"f:spec": {"f:containers": {"x:1": {}}}}}},
        manager="kubectl-client-side-apply",
        operation="Update",
    )
    obj = deployment(bad)
    obj["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
            {"spec": {"template": {"spec": {"containers": [{"name": "web"}]}}}}
        )
    }
    assert keep_owned(obj, OWNED).fallback == "malformed"


def stored_secret(
    *entries: dict[str, Any], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Secret as the API server keeps it: `stringData` already moved into `data`."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "db",
            "namespace": "ns",
            "annotations": annotations or {},
            "managedFields": list(entries),
        },
        "data": {"password": "c2VjcmV0", "user": "YXBw"},
        "type": "Opaque",
    }


def test_secret_string_data_owns_its_data_keys_for_both_kinds_of_apply() -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "ns"},
        "stringData": {"password": "secret", "user": "app"},
    }
    annotations = {LAST_APPLIED: json.dumps(manifest)}
    client_side: dict[str, Any] = {
        "f:data": {".": {}, "f:password": {}, "f:user": {}},
        "f:metadata": {"f:annotations": {".": {}, f"f:{LAST_APPLIED}": {}}},
        "f:type": {},
    }
    csa = stored_secret(
        entry(client_side, CLIENT_SIDE_APPLY, "Update", "v1"), annotations=annotations
    )
    assert owned(csa)["data"] == {"password": "c2VjcmV0", "user": "YXBw"}
    server_side: dict[str, Any] = {"f:stringData": {"f:password": {}, "f:user": {}}}
    ssa = stored_secret(entry(server_side, "kubectl", "Apply", "v1"))
    assert owned(ssa)["data"] == {"password": "c2VjcmV0", "user": "YXBw"}
