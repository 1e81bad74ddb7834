"""Models of the kubescribe.io/v1alpha1 resources: the single source of truth for the CRDs.

Python names are snake_case, the wire format is camelCase (`model_validate` accepts both,
`model_dump` emits camelCase). Field descriptions become CRD docs; CEL rules
(`x-kubernetes-validations`) live next to the field they check, via `json_schema_extra`.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import AwareDatetime, ConfigDict, Field

from kubescribe.api.schema import (
    DURATION_PATTERN,
    IMMUTABLE,
    NAME_RULE,
    NAMESPACE_RULE,
    ApiModel,
    LocalObjectReference,
    NamespacedObjectReference,
    ResourceName,
    Status,
    cel,
    defaulted,
    duration_rule,
)
from kubescribe.net.weblinks import TEMPLATE_PATTERN

GROUP: Final = "kubescribe.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "kubescribe.io/v1alpha1"

DEFAULT_CHANGE_MESSAGE: Final = "{operation} {kind} {ref}"
DEFAULT_SNAPSHOT_MESSAGE: Final = (
    "Snapshot {resource} in {scope}: {added} added, {updated} updated, {removed} removed"
)
DEFAULT_GROUP_MESSAGE: Final = "{count} changes: {operations} ({kinds})"
DEFAULT_COMMIT_WINDOW: Final = "5s"
DEFAULT_MAX_CHANGES_PER_COMMIT: Final = 500
DEFAULT_COMMITTER_NAME: Final = "kubescribe"
DEFAULT_COMMITTER_EMAIL: Final = "kubescribe@users.noreply.local"

Operation = Literal["CREATE", "UPDATE", "DELETE", "*"]
AttributionMode = Literal["configured-author", "attributed-author"]


# --- GitProvider --------------------------------------------------------------------------


class Committer(ApiModel):
    """Identity recorded as committer (authors come from attribution)."""

    name: str = Field(DEFAULT_COMMITTER_NAME, min_length=1, description="Committer name.")
    email: str = Field(DEFAULT_COMMITTER_EMAIL, min_length=1, description="Committer email.")


class CommitMessages(ApiModel):
    """Commit message templates (`{field}` placeholders, str.format syntax, no format specs)."""

    change: str = Field(
        DEFAULT_CHANGE_MESSAGE,
        min_length=1,
        description=(
            "Message of a commit for observed changes. Fields: `operation` (CREATE, UPDATE or"
            " DELETE), `kind`, `group`, `version`, `resource`, `namespace`, `name`, `ref`"
            " (`namespace/name`, or `name` for cluster-scoped objects), `target` (GitTarget"
            " name), `path` (file path in the repository)."
        ),
    )
    snapshot: str = Field(
        DEFAULT_SNAPSHOT_MESSAGE,
        min_length=1,
        description=(
            "Message of a commit that reconciles a full snapshot of one type. Fields: `resource`,"
            " `group`, `scope` (namespace, or `cluster`), `added`, `updated`, `removed` (document"
            " counts), `target` (GitTarget name)."
        ),
    )
    group: str = Field(
        DEFAULT_GROUP_MESSAGE,
        min_length=1,
        description=(
            "Subject of a commit that groups several changes of one author (a commit window);"
            " the body lists each change with the `change` template. Fields: `count`"
            " (changes), `operations` (e.g. `2 created, 1 updated`), `resources` (e.g."
            " `configmaps, deployments.apps`), `kinds` (e.g. `ConfigMap, Deployment`),"
            " `target` (GitTarget `namespace/name`), `author` (commit author name)."
        ),
    )


class CommitSpec(ApiModel):
    """How commits are made."""

    committer: Committer = defaulted(Committer, "Committer identity.")
    message: CommitMessages = defaulted(CommitMessages, "Commit message templates.")


_DATA_KEY_RULE = r"^[-._a-zA-Z0-9]+$"


class KnownHostsReference(ApiModel):
    """A key of a ConfigMap or Secret in the same namespace that holds known_hosts lines."""

    kind: Literal["ConfigMap", "Secret"] = Field(description="ConfigMap or Secret.")
    name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the ConfigMap or Secret.",
        json_schema_extra=cel(NAME_RULE),
    )
    key: str = Field(
        "known_hosts",
        min_length=1,
        max_length=253,
        pattern=_DATA_KEY_RULE,
        description="Key holding the known_hosts lines.",
    )


class SigningSpec(ApiModel):
    """SSH signatures on every commit the operator makes (git `gpg.format=ssh`)."""

    secret_ref: LocalObjectReference = Field(
        description=(
            "Secret in the same namespace holding an unencrypted ed25519 private key in OpenSSH"
            " format (`ssh-keygen -t ed25519 -N ''`)."
        )
    )
    key: str = Field(
        "signing.key",
        min_length=1,
        max_length=253,
        pattern=_DATA_KEY_RULE,
        description="Key of the Secret that holds the private key.",
    )
    generate_when_missing: bool = Field(
        False,
        description=(
            "Generate a key into the Secret (created if missing) when it holds none. Without"
            " a key no commit is made: commits are never written unsigned."
        ),
    )


class PushSpec(ApiModel):
    """How changes are grouped into commits before they are pushed."""

    commit_window: str = Field(
        DEFAULT_COMMIT_WINDOW,
        max_length=32,
        pattern=DURATION_PATTERN,
        description=(
            "Changes to one GitTarget by one author that arrive within this duration of each"
            " other (each change restarts it) become one commit, pushed when the window closes."
            " Another author, `maxChangesPerCommit`, a snapshot of the target or a"
            " CommitRequest close it early. `0s`: one commit per change, pushed at once. Go"
            " duration syntax (`5s`, `500ms`, `1m30s`), at most 1h; changes apply without a"
            " restart."
        ),
        json_schema_extra=duration_rule("1h"),
    )
    max_changes_per_commit: int = Field(
        DEFAULT_MAX_CHANGES_PER_COMMIT,
        ge=1,
        le=10000,
        description="A commit window closes when it holds this many changes.",
    )


class AttributionSpec(ApiModel):
    """Who is written as the author of a commit (the committer is always `commit.committer`)."""

    mode: AttributionMode = Field(
        "configured-author",
        description=(
            "configured-author: the author is the committer. attributed-author: the author is"
            " the user or controller that made the change, from the audit stream (exact, wins)"
            " or the operator's change admission webhook (joined by object and content; works"
            " on managed clusters); when no source names them in time, a visible sentinel"
            " `unknown (attribution unresolved)`, never the committer. A commit trailer"
            " `Kubescribe-Author-Source` says which source named the author. Snapshot commits"
            " are always the committer's."
        ),
    )
    infer_from_managed_fields: bool = Field(
        False,
        description=(
            "With attributed-author: when no fact matched the change at all, name the field"
            " manager of the change's latest managedFields entry instead (e.g. `kubectl-edit"
            " (inferred)`), marked as inferred in the author and the trailer. A tool, not a"
            " person. Facts that contradict each other give the unresolved author, never a"
            " guess; entries dated after the change was observed are ignored."
        ),
    )


class GitProviderSpec(ApiModel):
    """A Git repository and how to write to it."""

    url: str = Field(
        min_length=1,
        max_length=2048,
        description="Repository URL (https://, ssh:// or scp-like user@host:path). Immutable.",
        json_schema_extra=cel(IMMUTABLE),
    )
    secret_ref: LocalObjectReference | None = Field(
        None,
        description=(
            "Secret in the same namespace with the credentials for `url`: `ssh-privatekey`"
            " (or `identity`) with optional `passphrase` and `known_hosts`; or `username` and"
            " `password`, `token` or `bearerToken`, with optional `ca.crt`."
        ),
    )
    known_hosts_ref: KnownHostsReference | None = Field(
        None,
        description=(
            "known_hosts lines for SSH from a ConfigMap or Secret key; replaces the"
            " `known_hosts` key of the credentials Secret. SSH host keys are never trusted"
            " on first use: a host without a listed key is refused."
        ),
    )
    allowed_branches: list[str] = Field(
        default=["*"],
        description="Glob patterns of the branches that GitTargets may write to.",
    )
    commit: CommitSpec = defaulted(CommitSpec, "Committer identity and message templates.")
    push: PushSpec = defaulted(PushSpec, "Commit window: how changes are grouped into commits.")
    attribution: AttributionSpec = defaulted(AttributionSpec, "Who is recorded as author.")
    signing: SigningSpec | None = Field(
        None, description="Sign every commit with an SSH key; unset means unsigned commits."
    )
    commit_url_template: str | None = Field(
        None,
        max_length=2048,
        pattern=TEMPLATE_PATTERN,
        description=(
            "Web page of a commit, `https://` with exactly one `{sha}` placeholder (e.g."
            " `https://git.example.org/team/repo/-/commit/{sha}`), linked from Alert messages."
            " Unset: derived for remotes on github.com, gitlab.com and bitbucket.org."
        ),
    )


class SigningKeyStatus(ApiModel):
    """The public half of the commit signing key."""

    public_key: str = Field(
        description="`ssh-ed25519 AAAA... comment`, for git's `gpg.ssh.allowedSignersFile`."
    )
    fingerprint: str = Field(description="OpenSSH SHA256 fingerprint of the key.")


class RouteStatus(ApiModel):
    """How one fact route fed the resolver (refreshed at most once a minute)."""

    name: str = Field(description="Audit route, or `@admission` for the change webhook.")
    source: Literal["audit", "admission"] = Field(description="audit or admission.")
    facts: int = Field(ge=0, description="Facts received since the operator started.")
    last_fact_time: AwareDatetime | None = Field(None, description="When the last record came.")
    watermark: AwareDatetime | None = Field(
        None, description="The latest completed request the route has told of."
    )
    silent: bool = Field(description="No record for --audit-silent-after: lookups stop waiting.")


class AttributionStatus(ApiModel):
    """The fact routes that name the authors of this provider's (or cluster's) changes."""

    last_fact_time: AwareDatetime | None = Field(None, description="Latest of the routes'.")
    facts: int = Field(0, ge=0, description="Sum of the routes' facts.")
    routes: list[RouteStatus] = Field(default_factory=list, description="Each route.")


class GitProviderStatus(Status):
    """Observed state of a GitProvider."""

    attribution: AttributionStatus | None = Field(
        None, description="Health of the audit routes and change webhook (with attribution)."
    )

    normalized_url: str | None = Field(
        None, description="Canonical form of `url`; providers with the same one share writers."
    )
    signing_key: SigningKeyStatus | None = Field(
        None, description="The key commits are signed with, when `spec.signing` is set."
    )


# --- WatchRule / ClusterWatchRule --------------------------------------------------------


class LabelSelectorRequirement(ApiModel):
    """A label selector requirement."""

    key: str = Field(min_length=1, max_length=317, description="Label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn, Exists or DoesNotExist."
    )
    values: list[str] = Field(
        default_factory=list,
        max_length=256,
        description="Values; non-empty for In and NotIn, empty for Exists and DoesNotExist.",
    )

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "self.operator in ['In', 'NotIn']"
                " ? (has(self.values) && size(self.values) > 0)"
                " : (!has(self.values) || size(self.values) == 0)",
                "values must be non-empty for In and NotIn and empty for Exists and DoesNotExist",
            )
        )
    )


class LabelSelector(ApiModel):
    """Standard Kubernetes label selector; all requirements must match."""

    match_labels: dict[str, str] = Field(
        default_factory=dict, description="Labels that must have exactly these values."
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=64, description="Set-based requirements."
    )


class ClusterResourceRule(ApiModel):
    """Which resources to mirror and which operations make commits."""

    api_groups: list[str] = Field(
        min_length=1,
        max_length=64,
        description='API groups; `""` is the core group, `*` any group.',
    )
    api_versions: list[str] = Field(
        default=["*"],
        min_length=1,
        max_length=16,
        description="API versions; `*` means the preferred version of each group.",
    )
    resources: list[ResourceName] = Field(
        min_length=1,
        max_length=64,
        description="Plural resource names (`deployments`), `*` for all; no subresources.",
    )
    operations: list[Operation] = Field(
        default=["*"],
        min_length=1,
        max_length=4,
        description="Operations that make commits: CREATE, UPDATE, DELETE or `*`.",
    )
    label_selector: LabelSelector | None = Field(
        None, description="Only objects whose labels match; all objects when unset."
    )


class ResourceRule(ClusterResourceRule):
    """Which namespaced resources to mirror, from which namespace."""

    source_namespace: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        description="Namespace to read from; defaults to the WatchRule's own namespace.",
        json_schema_extra=cel(NAMESPACE_RULE),
    )


class ClusterReference(ApiModel):
    """A ClusterProvider, by name."""

    name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the ClusterProvider.",
        json_schema_extra=cel(NAME_RULE),
    )


_CLUSTER_REF_DOC = (
    "Mirror from the remote cluster of this ClusterProvider instead of the operator's own; the"
    " ClusterProvider must allow the namespace (spec.allowedNamespaces). Every rule feeding one"
    " GitTarget must name the same cluster."
)


class WatchRuleSpec(ApiModel):
    """Namespaced resources that feed a GitTarget in the same namespace."""

    target_ref: LocalObjectReference = Field(description="GitTarget in the same namespace.")
    cluster_ref: ClusterReference | None = Field(None, description=_CLUSTER_REF_DOC)
    rules: list[ResourceRule] = Field(
        min_length=1,
        max_length=64,
        description="Resource rules; an object matching any is mirrored.",
    )


_NamespaceName = Annotated[
    str, Field(min_length=1, max_length=63, json_schema_extra=cel(NAMESPACE_RULE))
]


class NamespaceSelector(ApiModel):
    """Which namespaces a ClusterWatchRule reads namespaced resources from: every namespace
    that matches all fields set (every namespace when none is)."""

    names: list[_NamespaceName] = Field(
        default_factory=list, max_length=256, description="Namespace names; any when empty."
    )
    label_selector: LabelSelector | None = Field(
        None, description="Namespace labels; any namespace when unset."
    )


class ClusterWatchResourceRule(ClusterResourceRule):
    """Which resources to mirror: cluster-scoped ones, and with `namespaces` also namespaced
    ones from every namespace the selector admits."""

    namespaces: NamespaceSelector | None = Field(
        None,
        description=(
            "Also mirror namespaced resources, from the namespaces this selects (`{}`: all)."
            " One cluster-wide stream per type, filtered by the admitted namespaces; namespaces"
            " created or relabelled later are picked up."
        ),
    )


class ClusterWatchRuleSpec(ApiModel):
    """Cluster-scoped resources (and, with `namespaces`, namespaced ones across namespaces)
    that feed a GitTarget."""

    target_ref: NamespacedObjectReference = Field(description="GitTarget (name and namespace).")
    cluster_ref: ClusterReference | None = Field(None, description=_CLUSTER_REF_DOC)
    rules: list[ClusterWatchResourceRule] = Field(
        min_length=1,
        max_length=64,
        description="Resource rules; an object matching any is mirrored.",
    )


class WatchRuleStatus(Status):
    """Observed state of a WatchRule or ClusterWatchRule."""

    resolved_resources: list[str] = Field(
        default_factory=list,
        description="Resolved resources as `group/version/resource` (`v1/pods` for core).",
    )


# --- ClusterProvider ----------------------------------------------------------------------


_NamespaceOrAll = Annotated[
    str,
    Field(
        min_length=1,
        max_length=63,
        json_schema_extra=cel(
            (
                "self == '*' || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
                "must be a namespace name or '*'",
            )
        ),
    ),
]


class KubeconfigSecretReference(ApiModel):
    """A key of a Secret that holds a kubeconfig."""

    name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the Secret.",
        json_schema_extra=cel(NAME_RULE),
    )
    namespace: str = Field(
        min_length=1,
        max_length=63,
        description="Namespace of the Secret.",
        json_schema_extra=cel(NAMESPACE_RULE),
    )
    key: str = Field("kubeconfig", min_length=1, max_length=253, description="Key in the Secret.")


class ClusterProviderSpec(ApiModel):
    """A remote cluster to mirror from, and who may use it."""

    kubeconfig_secret_ref: KubeconfigSecretReference = Field(
        description=(
            "Secret with the kubeconfig of the remote cluster. Refused: exec plugins, auth"
            " providers, file references and insecure-skip-tls-verify (unless the operator runs"
            " with --allow-insecure-cluster-tls)."
        )
    )
    context: str | None = Field(
        None, max_length=253, description="Kubeconfig context; its current-context when unset."
    )
    allowed_namespaces: list[_NamespaceOrAll] = Field(
        default_factory=list,
        max_length=256,
        description=(
            "Namespaces of the operator's cluster whose WatchRules (and GitTargets, for"
            " ClusterWatchRules) may use the ClusterProvider; `*` for all. None when empty:"
            " deny by default."
        ),
    )
    qps: float = Field(20.0, ge=0.1, le=1000, description="Requests per second to the cluster.")
    burst: int = Field(40, ge=1, le=10000, description="Requests allowed at once above qps.")
    audit_route: str | None = Field(
        None,
        max_length=63,
        description=(
            "Audit route of the remote cluster's API server (/audit-webhook/<route> on the"
            " operator's receiver): its facts name the authors of this cluster's changes, and"
            " only of this cluster's. Without it, attributed commits get the unresolved author."
        ),
        json_schema_extra=cel(NAMESPACE_RULE),
    )


class ClusterProviderStatus(Status):
    """Observed state of a ClusterProvider."""

    server: str | None = Field(None, description="API server URL from the kubeconfig.")
    server_version: str | None = Field(None, description="gitVersion the API server reports.")
    attribution: AttributionStatus | None = Field(
        None, description="Health of `spec.auditRoute` (when set and audit is received)."
    )


# --- CommitRequest ------------------------------------------------------------------------


class CommitRequestSpec(ApiModel):
    """Close the open commit window of a GitTarget now, with a message. Immutable."""

    target_ref: LocalObjectReference = Field(description="GitTarget in the same namespace.")
    message: str = Field(
        min_length=1,
        max_length=65536,
        description=(
            "Commit message (its first line is the subject). The commit body lists the"
            " changes. Only the requester's own window is closed (see `AuthorAttributed`)."
        ),
        json_schema_extra=cel(("self.trim() != ''", "must not be blank")),
    )
    collect_delay: str | None = Field(
        None,
        max_length=32,
        pattern=DURATION_PATTERN,
        description=(
            "Wait this long for changes still arriving (e.g. applied with this request) before"
            " closing the window; the window stays open meanwhile, also with a `0s`"
            " commitWindow. Go duration syntax, at most 10m. Changes created before the"
            " request are always waited for."
        ),
        json_schema_extra=duration_rule("10m"),
    )
    author: str | None = Field(None, min_length=1, max_length=512, description=(
        "Commit the requester's window as this Kubernetes user; allowed only when the requester"
        " (as the admission webhook recorded them) may `impersonate` that user."
    ))  # fmt: skip
    ttl_after_finished: str | None = Field(None, max_length=32, pattern=DURATION_PATTERN,
        description="Delete the request this long after it finished (`0s`: at once; 24h unset).",
        json_schema_extra=duration_rule("8760h"))  # fmt: skip

    model_config = ConfigDict(json_schema_extra=cel(("self == oldSelf", "spec is immutable")))


class CommitRequestStatus(Status):
    """Observed state of a CommitRequest."""

    branch: str | None = Field(None, description="Branch the commit was pushed to.")
    sha: str | None = Field(
        None, description="The pushed commit (refreshed when the push was rebuilt on a new tip)."
    )
    changes: int | None = Field(None, ge=0, description="Changes in the commit.")
    author: str | None = Field(None, description="Author of the commit, `Name <email>`.")
    expires_at: str | None = Field(
        None,
        description="When the finished request is deleted (`spec.ttlAfterFinished` after it ends).",
    )
