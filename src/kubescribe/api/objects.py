"""The kubescribe kinds as CRD objects: kind, names, printer columns, spec and status (the specs
and statuses themselves are in `models`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, Literal

from pydantic import Field

from kubescribe.api.alert import AlertSpec, AlertStatus
from kubescribe.api.gittarget import GitTargetSpec, GitTargetStatus
from kubescribe.api.models import (
    API_VERSION,
    ClusterProviderSpec,
    ClusterProviderStatus,
    ClusterWatchRuleSpec,
    CommitRequestSpec,
    CommitRequestStatus,
    GitProviderSpec,
    GitProviderStatus,
    WatchRuleSpec,
    WatchRuleStatus,
)
from kubescribe.api.schema import ApiModel, ObjectMeta


@dataclass(frozen=True)
class Column:
    """An `additionalPrinterColumns` entry."""

    name: str
    json_path: str
    type: str = "string"
    priority: int = 0


_READY_COLUMNS: Final = (
    Column("Ready", '.status.conditions[?(@.type=="Ready")].status'),
    Column("Reason", '.status.conditions[?(@.type=="Ready")].reason'),
)


class ApiObject(ApiModel):
    """A kubescribe object; subclasses declare `kind`, `spec`, `status` and CRD names."""

    plural: ClassVar[str]
    short_name: ClassVar[str]
    namespaced: ClassVar[bool] = True
    columns: ClassVar[tuple[Column, ...]]

    api_version: Literal["kubescribe.io/v1alpha1"] = Field(
        API_VERSION, description="Versioned schema of this representation of an object."
    )
    metadata: ObjectMeta = Field(
        default_factory=ObjectMeta, description="Standard object metadata."
    )


class GitProvider(ApiObject):
    """A Git repository: URL, credentials, allowed branches, commit identity and messages."""

    plural = "gitproviders"
    short_name = "gp"
    columns = (
        Column("URL", ".spec.url"),
        *_READY_COLUMNS,
        Column("Writable", '.status.conditions[?(@.type=="Writable")].status'),
    )

    kind: Literal["GitProvider"] = Field("GitProvider", description="Kind of the object.")
    spec: GitProviderSpec = Field(description="Desired state.")
    status: GitProviderStatus = Field(
        default_factory=GitProviderStatus, description="Observed state, written by the operator."
    )


class GitTarget(ApiObject):
    """One folder on one branch of a GitProvider that kubescribe mirrors objects into."""

    plural = "gittargets"
    short_name = "gt"
    columns = (
        Column("Provider", ".spec.providerRef.name"),
        Column("Branch", ".spec.branch"),
        Column("Path", ".spec.path"),
        *_READY_COLUMNS,
        Column("Documents", ".status.documents", "integer"),
        Column("Authors", '.status.conditions[?(@.type=="AuthorsAttributed")].reason'),
        Column("Commit", ".status.lastCommit", priority=1),
    )

    kind: Literal["GitTarget"] = Field("GitTarget", description="Kind of the object.")
    spec: GitTargetSpec = Field(description="Desired state.")
    status: GitTargetStatus = Field(
        default_factory=GitTargetStatus, description="Observed state, written by the operator."
    )


class WatchRule(ApiObject):
    """Namespaced resources to mirror into a GitTarget of the same namespace."""

    plural = "watchrules"
    short_name = "wr"
    columns = (Column("Target", ".spec.targetRef.name"), *_READY_COLUMNS)

    kind: Literal["WatchRule"] = Field("WatchRule", description="Kind of the object.")
    spec: WatchRuleSpec = Field(description="Desired state.")
    status: WatchRuleStatus = Field(
        default_factory=WatchRuleStatus, description="Observed state, written by the operator."
    )


class ClusterWatchRule(ApiObject):
    """Cluster-scoped resources to mirror into a GitTarget."""

    plural = "clusterwatchrules"
    short_name = "cwr"
    namespaced = False
    columns = (
        Column("Target", ".spec.targetRef.name"),
        Column("Target Namespace", ".spec.targetRef.namespace"),
        *_READY_COLUMNS,
    )

    kind: Literal["ClusterWatchRule"] = Field("ClusterWatchRule", description="Kind of the object.")
    spec: ClusterWatchRuleSpec = Field(description="Desired state.")
    status: WatchRuleStatus = Field(
        default_factory=WatchRuleStatus, description="Observed state, written by the operator."
    )


class ClusterProvider(ApiObject):
    """A remote cluster, from a kubeconfig in a Secret, that WatchRules may mirror from."""

    plural = "clusterproviders"
    short_name = "clp"
    namespaced = False
    columns = (
        Column("Server", ".status.server"),
        *_READY_COLUMNS,
        Column("Version", ".status.serverVersion", priority=1),
    )

    kind: Literal["ClusterProvider"] = Field("ClusterProvider", description="Kind of the object.")
    spec: ClusterProviderSpec = Field(description="Desired state.")
    status: ClusterProviderStatus = Field(
        default_factory=ClusterProviderStatus,
        description="Observed state, written by the operator.",
    )


class CommitRequest(ApiObject):
    """A request to commit and push a GitTarget's open commit window now, with a message."""

    plural = "commitrequests"
    short_name = "creq"
    columns = (
        Column("Target", ".spec.targetRef.name"),
        *_READY_COLUMNS,
        Column("SHA", ".status.sha"),
        Column("Message", ".spec.message", priority=1),
    )

    kind: Literal["CommitRequest"] = Field("CommitRequest", description="Kind of the object.")
    spec: CommitRequestSpec = Field(description="Desired state (immutable).")
    status: CommitRequestStatus = Field(
        default_factory=CommitRequestStatus,
        description="Observed state, written by the operator.",
    )


class Alert(ApiObject):
    """Tells a receiver of the changes the GitTargets of its namespace write (docs/alerts.md)."""

    plural = "alerts"
    short_name = "kal"
    columns = (
        Column("URL", ".spec.webhook.url", priority=1),
        *_READY_COLUMNS,
        Column("Delivering", '.status.conditions[?(@.type=="DeliveryFailing")].reason'),
    )

    kind: Literal["Alert"] = Field("Alert", description="Kind of the object.")
    spec: AlertSpec = Field(description="Desired state.")
    status: AlertStatus = Field(
        default_factory=AlertStatus, description="Observed state, written by the operator."
    )


KINDS: Final[tuple[type[ApiObject], ...]] = (
    GitProvider,
    GitTarget,
    WatchRule,
    ClusterWatchRule,
    CommitRequest,
    ClusterProvider,
    Alert,
)
