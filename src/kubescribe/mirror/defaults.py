"""Values the API server fills in when a field is left out, per built-in kind (data).

`Owned` content keeps what field managers own, but Kubernetes records server defaults as owned
by the manager of an `Update` (kubectl create, most controllers and clients): the object is
defaulted before ownership is computed. It also cannot tell defaults
inside an atomic value (a RoleBinding's `subjects`, a StatefulSet's `volumeClaimTemplates`)
from what was written. Where ownership is that coarse, a value equal to the default the server
would fill in again is left out: applying the document again yields the same object.

A table is a trie of field names (`*`: every list item or map key) whose leaves are
predicates `(value, parent map) -> bool`: whether the value is the default there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Any, Mapping[str, Any]], bool]
Defaults = Mapping[str, "Defaults | Predicate"]


def equals(default: Any) -> Predicate:
    return lambda value, parent: bool(value == default)


def _pull_policy(value: Any, container: Mapping[str, Any]) -> bool:
    # `Always` for an untagged image or `:latest`, else `IfNotPresent` (a digest is a pin).
    image = str(container.get("image") or "")
    tag = image.rpartition("/")[2]
    latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
    return bool(value == ("Always" if latest else "IfNotPresent"))


def _requests_from_limits(value: Any, resources: Mapping[str, Any]) -> bool:
    # Requests left out are set to the limits.
    limits = resources.get("limits")
    return (
        isinstance(value, Mapping)
        and isinstance(limits, Mapping)
        and all(limits.get(k) == v for k, v in value.items())
    )


def _same_as_port(value: Any, port: Mapping[str, Any]) -> bool:
    return bool(value == port.get("port"))


def _same_as_default(value: Any, limit: Mapping[str, Any]) -> bool:
    return bool(value == limit.get("default"))


def _list_kind(value: Any, names: Mapping[str, Any]) -> bool:
    return bool(value == f"{names.get('kind')}List")


def _singular(value: Any, names: Mapping[str, Any]) -> bool:
    return bool(value == str(names.get("kind") or "").lower())


def _policy_types(value: Any, spec: Mapping[str, Any]) -> bool:
    return bool(value == (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]))


def _subject_group(value: Any, subject: Mapping[str, Any]) -> bool:
    group = "" if subject.get("kind") == "ServiceAccount" else "rbac.authorization.k8s.io"
    return bool(value == group)


TCP = equals("TCP")
MODE_420 = equals(420)
_PROBE: Defaults = {
    "timeoutSeconds": equals(1),
    "periodSeconds": equals(10),
    "successThreshold": equals(1),
    "failureThreshold": equals(3),
    "httpGet": {"scheme": equals("HTTP")},
}
_CONTAINER: Defaults = {
    "imagePullPolicy": _pull_policy,
    "resources": {"requests": _requests_from_limits},
    "terminationMessagePath": equals("/dev/termination-log"),
    "terminationMessagePolicy": equals("File"),
    "ports": {"*": {"protocol": TCP}},
    "env": {"*": {"valueFrom": {"fieldRef": {"apiVersion": equals("v1")}}}},
    "livenessProbe": _PROBE,
    "readinessProbe": _PROBE,
    "startupProbe": _PROBE,
}
_POD_SPEC: Defaults = {
    "containers": {"*": _CONTAINER},
    "initContainers": {"*": _CONTAINER},
    "dnsPolicy": equals("ClusterFirst"),
    "enableServiceLinks": equals(True),
    "restartPolicy": equals("Always"),
    "schedulerName": equals("default-scheduler"),
    "securityContext": equals({}),
    "terminationGracePeriodSeconds": equals(30),
    "volumes": {
        "*": {
            "configMap": {"defaultMode": MODE_420},
            "secret": {"defaultMode": MODE_420},
            "projected": {"defaultMode": MODE_420},
            "downwardAPI": {"defaultMode": MODE_420},
            "hostPath": {"type": equals("")},
        }
    },
}
_TEMPLATE: Defaults = {"spec": _POD_SPEC}
_JOB_SPEC: Defaults = {
    "backoffLimit": equals(6),
    "completionMode": equals("NonIndexed"),
    "completions": equals(1),
    "parallelism": equals(1),
    "manualSelector": equals(False),
    "podReplacementPolicy": equals("TerminatingOrFailed"),
    "suspend": equals(False),
    "template": _TEMPLATE,
}
_PVC_SPEC: Defaults = {"volumeMode": equals("Filesystem")}
_SUBJECTS: Defaults = {"subjects": {"*": {"apiGroup": _subject_group}}}
_NETWORK_PORTS: Defaults = {"*": {"ports": {"*": {"protocol": TCP}}}}

DEFAULTS: Mapping[tuple[str, str], Defaults] = {
    ("", "Pod"): {"spec": _POD_SPEC},
    ("", "PodTemplate"): {"template": _TEMPLATE},
    ("", "ReplicationController"): {"spec": {"replicas": equals(1), "template": _TEMPLATE}},
    ("", "Service"): {
        "spec": {
            "type": equals("ClusterIP"),
            "sessionAffinity": equals("None"),
            "internalTrafficPolicy": equals("Cluster"),
            "externalTrafficPolicy": equals("Cluster"),
            "allocateLoadBalancerNodePorts": equals(True),
            "ports": {"*": {"protocol": TCP, "targetPort": _same_as_port}},
        }
    },
    ("", "PersistentVolumeClaim"): {"spec": _PVC_SPEC},
    ("", "LimitRange"): {"spec": {"limits": {"*": {"defaultRequest": _same_as_default}}}},
    ("", "PersistentVolume"): {
        "spec": {
            "persistentVolumeReclaimPolicy": equals("Retain"),
            "hostPath": {"type": equals("")},
            **_PVC_SPEC,
        }
    },
    ("apps", "Deployment"): {
        "spec": {
            "replicas": equals(1),
            "revisionHistoryLimit": equals(10),
            "progressDeadlineSeconds": equals(600),
            "strategy": {
                "type": equals("RollingUpdate"),
                "rollingUpdate": {"maxSurge": equals("25%"), "maxUnavailable": equals("25%")},
            },
            "template": _TEMPLATE,
        }
    },
    ("apps", "ReplicaSet"): {"spec": {"replicas": equals(1), "template": _TEMPLATE}},
    ("apps", "StatefulSet"): {
        "spec": {
            "replicas": equals(1),
            "revisionHistoryLimit": equals(10),
            "podManagementPolicy": equals("OrderedReady"),
            "updateStrategy": {
                "type": equals("RollingUpdate"),
                "rollingUpdate": {"partition": equals(0), "maxUnavailable": equals(1)},
            },
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": equals("Retain"),
                "whenScaled": equals("Retain"),
            },
            "template": _TEMPLATE,
            "volumeClaimTemplates": {
                "*": {
                    "apiVersion": equals("v1"),
                    "kind": equals("PersistentVolumeClaim"),
                    "spec": _PVC_SPEC,
                    "status": equals({"phase": "Pending"}),
                }
            },
        }
    },
    ("apps", "DaemonSet"): {
        "spec": {
            "revisionHistoryLimit": equals(10),
            "updateStrategy": {
                "type": equals("RollingUpdate"),
                "rollingUpdate": {"maxSurge": equals(0), "maxUnavailable": equals(1)},
            },
            "template": _TEMPLATE,
        }
    },
    ("batch", "Job"): {"spec": _JOB_SPEC},
    ("batch", "CronJob"): {
        "spec": {
            "concurrencyPolicy": equals("Allow"),
            "failedJobsHistoryLimit": equals(1),
            "successfulJobsHistoryLimit": equals(3),
            "suspend": equals(False),
            "jobTemplate": {"spec": {"template": _TEMPLATE}},
        }
    },
    ("autoscaling", "HorizontalPodAutoscaler"): {"spec": {"minReplicas": equals(1)}},
    ("networking.k8s.io", "NetworkPolicy"): {
        "spec": {"policyTypes": _policy_types, "ingress": _NETWORK_PORTS, "egress": _NETWORK_PORTS}
    },
    ("rbac.authorization.k8s.io", "RoleBinding"): _SUBJECTS,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _SUBJECTS,
    ("scheduling.k8s.io", "PriorityClass"): {"preemptionPolicy": equals("PreemptLowerPriority")},
    ("apiextensions.k8s.io", "CustomResourceDefinition"): {
        "spec": {
            "conversion": {"strategy": equals("None")},
            "names": {"listKind": _list_kind, "singular": _singular},
        }
    },
}
