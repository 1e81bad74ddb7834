"""A corpus of objects as people write them: 25 kinds, for Owned content end to end."""

from __future__ import annotations

from typing import Any

LABEL = "kubescribe.io/corpus"


def _meta(name: str, ns: str, suffix: str, *, cluster: bool = False) -> dict[str, Any]:
    if cluster:
        return {"name": f"{ns}-{name}-{suffix}", "labels": {LABEL: ns}}
    return {"name": f"{name}-{suffix}", "namespace": ns, "labels": {LABEL: ns}}


def _pod_spec(name: str, image: str, **extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": name, "image": image, **extra}]}


def group(ns: str, suffix: str) -> str:
    return f"{suffix}.{ns}.example.com"


def crd(ns: str, suffix: str) -> dict[str, Any]:
    """A CRD whose schema has a default (`color`) and a set (`tags`)."""
    spec_schema = {
        "type": "object",
        "properties": {
            "size": {"type": "integer"},
            "color": {"type": "string", "default": "blue"},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group(ns, suffix)}", "labels": {LABEL: ns}},
        "spec": {
            "group": group(ns, suffix),
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}
                    },
                }
            ],
        },
    }


def corpus(ns: str, suffix: str) -> list[dict[str, Any]]:
    """Every object once, named `<name>-<suffix>`; cluster-scoped ones carry `ns` in the name."""
    sel = {"matchLabels": {"app": f"web-{suffix}"}}
    web = {
        "metadata": {"labels": {"app": f"web-{suffix}"}},
        "spec": _pod_spec("web", "nginx:1.27", ports=[{"containerPort": 80}]),
    }
    db_template = {
        "metadata": {"labels": {"app": f"db-{suffix}"}},
        "spec": _pod_spec(
            "db", "postgres:17", volumeMounts=[{"name": "data", "mountPath": "/data"}]
        ),
    }
    claim = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    job_pod = {"restartPolicy": "Never", **_pod_spec("once", "busybox:1.37", command=["true"])}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta("web", ns, suffix),
            "spec": {"replicas": 2, "selector": sel, "template": web},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": _meta("db", ns, suffix),
            "spec": {
                "serviceName": f"db-{suffix}",
                "selector": {"matchLabels": {"app": f"db-{suffix}"}},
                "template": db_template,
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": claim}],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": _meta("agent", ns, suffix),
            "spec": {
                "selector": {"matchLabels": {"app": f"agent-{suffix}"}},
                "template": {
                    "metadata": {"labels": {"app": f"agent-{suffix}"}},
                    "spec": _pod_spec("agent", "busybox:1.37", args=["sleep", "infinity"]),
                },
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": _meta("rs", ns, suffix),
            "spec": {
                "selector": {"matchLabels": {"app": f"rs-{suffix}"}},
                "template": {
                    "metadata": {"labels": {"app": f"rs-{suffix}"}},
                    "spec": _pod_spec("rs", "nginx:latest"),
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": _meta("solo", ns, suffix),
            "spec": _pod_spec(
                "solo",
                "busybox",
                command=["sleep", "3600"],
                resources={"limits": {"cpu": "100m", "memory": "64Mi"}},
            ),
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": _meta("once", ns, suffix),
            "spec": {"template": {"spec": job_pod}},
        },
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": _meta("nightly", ns, suffix),
            "spec": {
                "schedule": "0 3 * * *",
                "jobTemplate": {"spec": {"template": {"spec": job_pod}}},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("web", ns, suffix),
            "spec": {
                "selector": {"app": f"web-{suffix}"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("web-np", ns, suffix),
            "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("web-fixed", ns, suffix),
            "spec": {
                "type": "NodePort",
                "selector": {"app": "web"},
                "ports": [{"port": 80, "nodePort": 30000 + {"create": 1, "csa": 2}.get(suffix, 3)}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("web-lb", ns, suffix),
            "spec": {
                "type": "LoadBalancer",
                "externalTrafficPolicy": "Local",
                "selector": {"app": "web"},
                "ports": [{"port": 443, "protocol": "TCP"}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("ext", ns, suffix),
            "spec": {"type": "ExternalName", "externalName": "example.com"},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("db", ns, suffix),
            "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]},
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": _meta("data", ns, suffix),
            "spec": claim,
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": _meta("web", ns, suffix),
            "spec": {
                "rules": [
                    {
                        "host": "web.example.com",
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {"service": {"name": "web", "port": {"number": 80}}},
                                }
                            ]
                        },
                    }
                ]
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta("reader", ns, suffix),
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta("reader", ns, suffix),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"reader-{suffix}",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": f"app-{suffix}", "namespace": ns},
                {"kind": "User", "name": "alice"},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta("viewer", ns, suffix, cluster=True),
            "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta("viewer", ns, suffix, cluster=True),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"{ns}-viewer-{suffix}",
            },
            "subjects": [{"kind": "Group", "name": "viewers"}],
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta("app", ns, suffix)},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("settings", ns, suffix),
            "data": {"mode": "fast"},
        },
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": _meta("web", ns, suffix),
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": f"web-{suffix}",
                },
                "maxReplicas": 5,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 80},
                        },
                    }
                ],
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": _meta("web", ns, suffix),
            "spec": {"minAvailable": 1, "selector": sel},
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta("web", ns, suffix),
            "spec": {"podSelector": sel, "ingress": [{"ports": [{"port": 80}]}]},
        },
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": _meta("quota", ns, suffix),
            "spec": {"hard": {"pods": "10"}},
        },
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": _meta("limits", ns, suffix),
            "spec": {"limits": [{"type": "Container", "default": {"cpu": "200m"}}]},
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": _meta("disk", ns, suffix, cluster=True),
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": f"/srv/{suffix}"},
            },
        },
        {
            "apiVersion": f"{group(ns, suffix)}/v1",
            "kind": "Widget",
            "metadata": _meta("w", ns, suffix),
            "spec": {"size": 3, "tags": ["a", "b"]},
        },
    ]


# (group, resource) of every kind above but the Widgets, namespaced first.
NAMESPACED = [
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("apps", "replicasets"),
    ("", "pods"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("", "services"),
    ("", "persistentvolumeclaims"),
    ("networking.k8s.io", "ingresses"),
    ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "rolebindings"),
    ("", "serviceaccounts"),
    ("", "configmaps"),
    ("autoscaling", "horizontalpodautoscalers"),
    ("policy", "poddisruptionbudgets"),
    ("networking.k8s.io", "networkpolicies"),
    ("", "resourcequotas"),
    ("", "limitranges"),
]
CLUSTER_SCOPED = [
    ("rbac.authorization.k8s.io", "clusterroles"),
    ("rbac.authorization.k8s.io", "clusterrolebindings"),
    ("", "persistentvolumes"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
]
