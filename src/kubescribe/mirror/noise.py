"""Which objects are noise: generated, ephemeral or cluster-specific, not worth a commit.

The policy is data: an ordered tuple of rules, first match wins. A rule's reason is a short
stable kebab-case string, used as a metric label.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

_CORE_GROUP = ""


def _matches(pattern: str | None, value: str) -> bool:
    return pattern is None or fnmatchcase(value, pattern)


def _str_field(obj: Mapping[str, Any], *path: str) -> str:
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value if isinstance(value, str) else ""


def _controller_owned(obj: Mapping[str, Any]) -> bool:
    metadata = obj.get("metadata")
    refs = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    return isinstance(refs, list) and any(
        isinstance(ref, Mapping) and ref.get("controller") is True for ref in refs
    )


@dataclass(frozen=True)
class NoiseRule:
    """Matches an object when every field that is set matches.

    String fields are exact values or fnmatch globs (case-sensitive); `group` "" is the core
    group. `secret_type` only matches core Secrets (an absent type counts as "Opaque").
    A rule whose `reason` is None is an exemption: a match keeps the object.
    """

    reason: str | None
    group: str | None = None
    resource: str | None = None
    namespace: str | None = None
    name: str | None = None
    secret_type: str | None = None
    controller_owned: bool = False

    def matches_type(self, group: str, resource: str) -> bool:
        return _matches(self.group, group) and _matches(self.resource, resource)

    def matches_whole_type(self) -> bool:
        """Whether the rule looks at nothing but the type, so it takes every object of it."""
        return (self.namespace, self.name, self.secret_type) == (None, None, None) and (
            not self.controller_owned
        )

    def matches(self, obj: Mapping[str, Any], *, group: str, resource: str) -> bool:
        if not self.matches_type(group, resource):
            return False
        if not _matches(self.namespace, _str_field(obj, "metadata", "namespace")):
            return False
        if not _matches(self.name, _str_field(obj, "metadata", "name")):
            return False
        if self.secret_type is not None:
            if (group, resource) != (_CORE_GROUP, "secrets"):
                return False
            if not _matches(self.secret_type, _str_field(obj, "type") or "Opaque"):
                return False
        return not self.controller_owned or _controller_owned(obj)


DEFAULT_RULES: tuple[NoiseRule, ...] = (
    NoiseRule("root-ca-bundle", group="", resource="configmaps", name="kube-root-ca.crt"),
    NoiseRule(
        "apiserver-authentication",
        group="",
        resource="configmaps",
        namespace="kube-system",
        name="extension-apiserver-authentication",
    ),
    NoiseRule(
        "leader-election",
        group="",
        resource="configmaps",
        namespace="kube-system",
        name="*-leader-election",
    ),
    NoiseRule(
        "service-account-token",
        group="",
        resource="secrets",
        secret_type="kubernetes.io/service-account-token",
    ),
    NoiseRule(
        "bootstrap-token", group="", resource="secrets", secret_type="bootstrap.kubernetes.io/token"
    ),
    NoiseRule("helm-release", group="", resource="secrets", secret_type="helm.sh/release.v1"),
    NoiseRule("event", group="", resource="events"),
    NoiseRule("event", group="events.k8s.io", resource="events"),
    NoiseRule("lease", group="coordination.k8s.io", resource="leases"),
    NoiseRule("endpoints", group="", resource="endpoints"),
    NoiseRule("endpoint-slice", group="discovery.k8s.io", resource="endpointslices"),
    NoiseRule("controller-revision", group="apps", resource="controllerrevisions"),
    NoiseRule("controller-owned", controller_owned=True),
)


@dataclass(frozen=True)
class NoisePolicy:
    rules: tuple[NoiseRule, ...]

    def classify(self, obj: Mapping[str, Any], *, group: str, resource: str) -> str | None:
        """The reason `obj` is noise, or None to mirror it."""
        for rule in self.rules:
            if rule.matches(obj, group=group, resource=resource):
                return rule.reason
        return None

    def drops_type(self, group: str, resource: str) -> bool:
        """Whether every object of the type is noise, so watching it is pointless."""
        for rule in self.rules:
            if not rule.matches_type(group, resource):
                continue
            if rule.reason is None:
                return False
            if rule.matches_whole_type():
                return True
        return False

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "NoisePolicy":
        """Build a policy from user settings.

        ``{"disableDefaults": bool, "rules": [rule...], "allow": [matcher...]}``; a rule has a
        kebab-case ``reason`` and matcher fields ``group``, ``resource``, ``namespace``,
        ``name``, ``secretType``, ``controllerOwned``. User rules come first, then the allow
        entries, which exempt matching objects from the defaults, then the defaults.
        """
        _check_keys("noise config", config, {"disableDefaults", "rules", "allow"})
        disable = config.get("disableDefaults", False)
        if not isinstance(disable, bool):
            raise ValueError("noise config: disableDefaults must be a boolean")
        rules = tuple(
            _parse_rule(f"noise rule {i}", entry, allow=False)
            for i, entry in enumerate(_entries(config, "rules"))
        )
        allow = tuple(
            _parse_rule(f"noise allow entry {i}", entry, allow=True)
            for i, entry in enumerate(_entries(config, "allow"))
        )
        return cls(rules + allow + (() if disable else DEFAULT_RULES))


DEFAULT_NOISE_POLICY = NoisePolicy(DEFAULT_RULES)

_REASON = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_CONFIG_FIELDS = {
    "group": "group",
    "resource": "resource",
    "namespace": "namespace",
    "name": "name",
    "secretType": "secret_type",
    "controllerOwned": "controller_owned",
}


def _check_keys(where: str, obj: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {sorted(allowed)}")


def _entries(config: Mapping[str, Any], key: str) -> list[Any]:
    entries = config.get(key, [])
    if not isinstance(entries, list | tuple):
        raise ValueError(f"noise config: {key} must be a list")
    return list(entries)


def _parse_rule(where: str, entry: Any, *, allow: bool) -> NoiseRule:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: must be a mapping")
    _check_keys(where, entry, set(_CONFIG_FIELDS) if allow else {"reason", *_CONFIG_FIELDS})
    reason = None
    if not allow:
        if "reason" not in entry:
            raise ValueError(f"{where}: needs a reason")
        reason = entry["reason"]
        if not isinstance(reason, str) or not _REASON.fullmatch(reason):
            raise ValueError(f"{where}: reason must be a kebab-case string, got {reason!r}")
    matchers: dict[str, Any] = {}
    for key, attr in _CONFIG_FIELDS.items():
        if key not in entry:
            continue
        value = entry[key]
        expected = bool if key == "controllerOwned" else str
        if not isinstance(value, expected):
            raise ValueError(f"{where}: {key} must be a {expected.__name__}, got {value!r}")
        matchers[attr] = value
    rule = NoiseRule(reason, **matchers)
    if rule.matches_whole_type() and rule.group is None and rule.resource is None:
        raise ValueError(f"{where}: needs at least one matcher, or it matches every object")
    return rule
