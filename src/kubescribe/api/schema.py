"""The building blocks of the API's models: the base model (camelCase on the wire), CEL rules
and schema hints, object references and metadata, conditions and the status every kind shares."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from kubescribe.gitnames import RESERVED_PATTERN

ConditionStatus = Literal["True", "False", "Unknown"]


def cel(*rules: tuple[str, str]) -> JsonDict:
    """`json_schema_extra` with CEL rules (`x-kubernetes-validations`) as `(rule, message)`."""
    validations: list[Any] = [{"rule": rule, "message": message} for rule, message in rules]
    return {"x-kubernetes-validations": validations}


def list_map(*keys: str) -> JsonDict:
    """A list of objects that the API server merges and de-duplicates by `keys`."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def defaulted(model: type[BaseModel], description: str) -> Any:
    """A nested object that the API server creates as `{}` so its own field defaults apply."""
    return Field(default_factory=model, description=description, json_schema_extra={"default": {}})


IMMUTABLE = ("self == oldSelf", "is immutable")
NAME_RULE = (
    "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",
    "must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-' and '.')",
)
NAMESPACE_RULE = (
    "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
    "must be a lowercase RFC 1123 label (a-z, 0-9 and '-')",
)
RELATIVE_PATH_RULES = (
    ("!self.startsWith('/')", "must be relative (no leading '/')"),
    ("!self.matches('(^|/)[.][.](/|$)')", "must not contain a '..' segment"),
    (
        "self == '.' || self.startsWith('/') || !self.matches('(^|/)[.]?(/|$)')",
        "must not contain empty or '.' segments (use '.' alone for the repository root)",
    ),
)
GIT_NAMES_RULE = (
    f"!self.matches(r'{RESERVED_PATTERN}')",
    "must not contain a segment Git refuses: .git, .gitmodules, .gitattributes or a"
    " Windows/macOS alias of one (git~1, .git., .GIT, …)",
)
BRANCH_RULES = (
    (
        r"!self.matches('[[:cntrl:] ~^:?*\\[\\\\]')",
        "must not contain spaces, control characters or any of ~ ^ : ? * [ \\",
    ),
    (
        "!self.startsWith('-') && !self.startsWith('/') && !self.startsWith('.')"
        " && !self.endsWith('/') && !self.endsWith('.') && !self.endsWith('.lock')",
        "must not start with '-', '/' or '.' and must not end with '/', '.' or '.lock'",
    ),
    (
        "!self.contains('..') && !self.contains('//') && !self.contains('@{')"
        " && !self.contains('/.') && !self.contains('.lock/') && self != '@'",
        "must be a valid git branch name: no '..', '//', '@{', no component starting with '.'"
        " or ending with '.lock'",
    ),
)
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"


def duration_rule(maximum: str) -> JsonDict:
    """CEL: a Go duration string (`5s`, `500ms`, `1m30s`) of at most `maximum`."""
    return cel((f"duration(self) <= duration('{maximum}')", f"must be at most {maximum}"))


ResourceName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=253,
        json_schema_extra=cel(
            ("!self.contains('/')", "subresources (names containing '/') cannot be watched")
        ),
    ),
]
AgeRecipient = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4096,
        json_schema_extra=cel(
            ("self.matches('^age1[0-9a-z]+$')", "must be an age recipient (age1…, lowercase)")
        ),
    ),
]
PATH_TEMPLATE_DOC = (
    "Path template relative to the target path, ending in `.yaml` (written as `.sops.yaml` when"
    " encrypted). `{field}` placeholders (str.format, no format specs): `namespace` (`_cluster`"
    " for cluster-scoped objects), `group` (`core` for the core group), `version`, `kind`,"
    " `resource`, `name`, `cluster` (the ClusterProvider of the target's rules, `local` for the"
    " operator's own cluster)."
)


class ApiModel(BaseModel):
    """Base of all API models: camelCase aliases, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True
    )


class LocalObjectReference(ApiModel):
    """Reference to an object in the same namespace."""

    name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the object.",
        json_schema_extra=cel(NAME_RULE),
    )


class NamespacedObjectReference(ApiModel):
    """Reference to an object in a given namespace."""

    name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the object.",
        json_schema_extra=cel(NAME_RULE),
    )
    namespace: str = Field(
        min_length=1,
        max_length=63,
        description="Namespace of the object.",
        json_schema_extra=cel(NAMESPACE_RULE),
    )


class ObjectMeta(ApiModel):
    """The part of Kubernetes object metadata that kubescribe reads."""

    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class Condition(ApiModel):
    """Standard Kubernetes condition (metav1.Condition)."""

    type: str = Field(
        min_length=1, max_length=316, description="Type of the condition, e.g. `Ready`."
    )
    status: ConditionStatus = Field(description="Status of the condition: True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="Stable CamelCase reason for the last transition.",
    )
    message: str = Field(max_length=32768, description="Human-readable detail.")
    last_transition_time: AwareDatetime = Field(description="When the status last changed.")
    observed_generation: int | None = Field(
        None, ge=0, description="The `.metadata.generation` this condition was computed for."
    )


class Status(ApiModel):
    """Status fields shared by every kind."""

    observed_generation: int | None = Field(
        None, ge=0, description="The `.metadata.generation` the operator last reconciled."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Reconciling and Stalled (kstatus) plus domain conditions.",
        json_schema_extra=list_map("type"),
    )
    last_handled_reconcile_at: str | None = Field(
        None, description="The last `kubescribe.io/reconcile-at` value the operator acted on."
    )
