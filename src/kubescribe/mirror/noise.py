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


def _metadata_map(obj: Mapping[str, Any], which: str) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    found = metadata.get(which) if isinstance(metadata, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _has_annotation(obj: Mapping[str, Any], matcher: str) -> bool:
    key, eq, value = matcher.partition("=")
    return any(
        fnmatchcase(str(k), key) and (not eq or fnmatchcase(str(v), value))
        for k, v in _metadata_map(obj, "annotations").items()
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
    annotation: str | None = None  # `key` (present) or `key=value`; key and value are globs

    def matches_type(self, group: str, resource: str) -> bool:
        return _matches(self.group, group) and _matches(self.resource, resource)

    def matches_whole_type(self) -> bool:
        """Whether the rule looks at nothing but the type, so it takes every object of it."""
        return (self.namespace, self.name, self.secret_type, self.annotation) == (
            None,
            None,
            None,
            None,
        ) and (not self.controller_owned)

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
        if self.annotation is not None and not _has_annotation(obj, self.annotation):
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
    # FlowSchemas and PriorityLevelConfigurations the API server keeps (mandatory and
    # suggested ones); objects a user made stay content.
    NoiseRule(
        "api-priority-and-fairness",
        group="flowcontrol.apiserver.k8s.io",
        annotation="apf.kubernetes.io/autoupdate-spec=true",
    ),
    NoiseRule("controller-owned", controller_owned=True),
)


@dataclass(frozen=True)
class StripRule:
    """Removes bookkeeping labels, annotations or finalizers from a mirrored document.

    `key` is an fnmatch glob on the label/annotation key or the finalizer; `on` is `labels`,
    `annotations`, `both` (labels and annotations) or `finalizers`; with `when` (a glob), only
    objects holding a label or annotation key matching it are touched. A rule whose `reason`
    is None is an exemption: a match keeps the key.
    """

    reason: str | None
    key: str
    on: str = "both"
    when: str | None = None

    def applies(self, where: str, key: str, obj: Mapping[str, Any]) -> bool:
        if self.on != where and (self.on != "both" or where == "finalizers"):
            return False
        if not fnmatchcase(key, self.key):
            return False
        if self.when is None:
            return True
        return any(
            fnmatchcase(str(k), self.when)
            for which in ("labels", "annotations")
            for k in _metadata_map(obj, which)
        )


_FLUX = ("kustomize.toolkit.fluxcd.io", "helm.toolkit.fluxcd.io")
DEFAULT_STRIP: tuple[StripRule, ...] = (
    # Flux settings a user writes on an object (https://fluxcd.io/flux/components/kustomize/
    # kustomizations/#controlling-the-apply-behavior-of-resources) are content, not bookkeeping.
    *(
        StripRule(None, f"{prefix}/{setting}", on="annotations")
        for prefix in _FLUX
        for setting in ("reconcile", "prune", "ssa", "force")
    ),
    *(StripRule("flux-bookkeeping", f"{prefix}/*") for prefix in _FLUX),
    StripRule("argocd-tracking", "argocd.argoproj.io/tracking-id", on="annotations"),
    StripRule(
        "argocd-tracking", "app.kubernetes.io/instance", on="labels", when="argocd.argoproj.io/*"
    ),
    StripRule("applyset", "applyset.kubernetes.io/*"),
    StripRule("kapp-bookkeeping", "kapp.k14s.io/app", on="labels"),
    StripRule("kapp-bookkeeping", "kapp.k14s.io/association", on="labels"),
    StripRule("kapp-bookkeeping", "kapp.k14s.io/identity", on="annotations"),
    StripRule("kapp-bookkeeping", "kapp.k14s.io/original", on="annotations"),
    StripRule("kapp-bookkeeping", "kapp.k14s.io/original-diff-md5", on="annotations"),
    # Added by the API server's admission and garbage collector, never by a person.
    *(
        StripRule("system-finalizer", finalizer, on="finalizers")
        for finalizer in (
            "kubernetes.io/pvc-protection",
            "kubernetes.io/pv-protection",
            "foregroundDeletion",
        )
    ),
)


@dataclass(frozen=True)
class NoisePolicy:
    rules: tuple[NoiseRule, ...]
    strip_rules: tuple[StripRule, ...] = DEFAULT_STRIP

    def strip(self, document: dict[str, Any], obj: Mapping[str, Any]) -> list[str]:
        """Remove the bookkeeping labels, annotations and finalizers of `document` (a
        sanitized copy of `obj`, edited in place); the reason of each one removed."""
        metadata = document.get("metadata")
        if not isinstance(metadata, dict) or not self.strip_rules:
            return []
        reasons: list[str] = []
        for where in ("labels", "annotations"):
            values = metadata.get(where)
            if not isinstance(values, dict):
                continue
            for key in list(values):
                for rule in self.strip_rules:
                    if rule.applies(where, str(key), obj):
                        if rule.reason is not None:
                            del values[key]
                            reasons.append(rule.reason)
                        break
            if not values:
                del metadata[where]
        self._strip_finalizers(metadata, obj, reasons)
        return reasons

    def _strip_finalizers(
        self, metadata: dict[str, Any], obj: Mapping[str, Any], reasons: list[str]
    ) -> None:
        finalizers = metadata.get("finalizers")
        if not isinstance(finalizers, list) or not finalizers:
            return
        kept = []
        for finalizer in finalizers:
            first = next(
                (r for r in self.strip_rules if r.applies("finalizers", str(finalizer), obj)),
                None,
            )
            if first is None or first.reason is None:
                kept.append(finalizer)
            else:
                reasons.append(first.reason)
        if kept:
            metadata["finalizers"] = kept
        else:
            del metadata["finalizers"]

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
    def from_config(
        cls, config: Mapping[str, Any], base: "NoisePolicy | None" = None
    ) -> "NoisePolicy":
        """Build a policy from user settings, on top of `base` (the defaults when None).

        ``{"disableDefaults": bool, "rules": [rule...], "allow": [matcher...],
        "strip": [strip...], "keep": [key matcher...]}``; a rule has a kebab-case ``reason``
        and matcher fields ``group``, ``resource``, ``namespace``, ``name``, ``secretType``,
        ``controllerOwned``, ``annotation``. User rules come first, then the allow entries,
        which exempt matching objects from the base, then the base rules. ``strip`` entries
        (``reason``, ``key``, ``on``, ``when``) remove labels/annotations; ``keep`` entries
        (``key``, ``on``, ``when``) exempt keys from the base's strip rules.
        ``disableDefaults`` drops the base entirely.
        """
        _check_keys("noise config", config, {"disableDefaults", "rules", "allow", "strip", "keep"})
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
        strip = tuple(
            _parse_strip(f"noise strip entry {i}", entry, keep=False)
            for i, entry in enumerate(_entries(config, "strip"))
        )
        keep = tuple(
            _parse_strip(f"noise keep entry {i}", entry, keep=True)
            for i, entry in enumerate(_entries(config, "keep"))
        )
        below = base if base is not None else cls(DEFAULT_RULES)
        if disable:
            return cls(rules + allow, strip + keep)
        return cls(rules + allow + below.rules, strip + keep + below.strip_rules)

    def reasons(self) -> list[str]:
        """Every reason this policy can count, for documentation and metrics."""
        found = [r.reason for r in self.rules] + [r.reason for r in self.strip_rules]
        return sorted({r for r in found if r is not None})


DEFAULT_NOISE_POLICY = NoisePolicy(DEFAULT_RULES)

_REASON = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_CONFIG_FIELDS = {
    "group": "group",
    "resource": "resource",
    "namespace": "namespace",
    "name": "name",
    "secretType": "secret_type",
    "controllerOwned": "controller_owned",
    "annotation": "annotation",
}
_STRIP_PLACES = ("labels", "annotations", "both", "finalizers")


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


def _parse_strip(where: str, entry: Any, *, keep: bool) -> StripRule:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: must be a mapping")
    _check_keys(where, entry, {"key", "on", "when"} | (set() if keep else {"reason"}))
    reason = None
    if not keep:
        reason = entry.get("reason")
        if not isinstance(reason, str) or not _REASON.fullmatch(reason):
            raise ValueError(f"{where}: reason must be a kebab-case string, got {reason!r}")
    key, on, when = entry.get("key"), entry.get("on", "both"), entry.get("when")
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}: needs a key (a glob on label/annotation keys or finalizers)")
    if on not in _STRIP_PLACES:
        raise ValueError(f"{where}: on must be one of {list(_STRIP_PLACES)}, got {on!r}")
    if when is not None and not isinstance(when, str):
        raise ValueError(f"{where}: when must be a string, got {when!r}")
    return StripRule(reason, key, on, when)
