"""Models of the kubescribe.io/v1alpha1 resources: the single source of truth for the CRDs.

Python names are snake_case, the wire format is camelCase (`model_validate` accepts both,
`model_dump` emits camelCase). Field descriptions become CRD docs; CEL rules
(`x-kubernetes-validations`) live next to the field they check, via `json_schema_extra`.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import AwareDatetime, ConfigDict, Field

from kubescribe.api.schema import (
    BRANCH_RULES,
    DURATION_PATTERN,
    GIT_NAMES_RULE,
    IMMUTABLE,
    NAME_RULE,
    NAMESPACE_RULE,
    PATH_TEMPLATE_DOC,
    RELATIVE_PATH_RULES,
    AgeRecipient,
    ApiModel,
    LocalObjectReference,
    NamespacedObjectReference,
    ResourceName,
    Status,
    cel,
    defaulted,
    duration_rule,
    list_map,
)

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
PruneMode = Literal["Never", "OnEvent", "Always"]


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


class SigningKeyStatus(ApiModel):
    """The public half of the commit signing key."""

    public_key: str = Field(
        description="`ssh-ed25519 AAAA... comment`, for git's `gpg.ssh.allowedSignersFile`."
    )
    fingerprint: str = Field(description="OpenSSH SHA256 fingerprint of the key.")


class GitProviderStatus(Status):
    """Observed state of a GitProvider."""

    normalized_url: str | None = Field(
        None, description="Canonical form of `url`; providers with the same one share writers."
    )
    signing_key: SigningKeyStatus | None = Field(
        None, description="The key commits are signed with, when `spec.signing` is set."
    )


# --- GitTarget ----------------------------------------------------------------------------


class TypePlacement(ApiModel):
    """Path template for one resource type."""

    group: str = Field("", max_length=253, description="API group; empty for the core group.")
    resource: str = Field(
        min_length=1, max_length=253, description="Plural resource name, e.g. `deployments`."
    )
    template: str = Field(
        min_length=1,
        max_length=1024,
        description=PATH_TEMPLATE_DOC,
        json_schema_extra=cel(
            ("self.endsWith('.yaml')", "must end with .yaml"),
            *RELATIVE_PATH_RULES,
            GIT_NAMES_RULE,
        ),
    )


class Placement(ApiModel):
    """Where documents go inside the target folder."""

    default: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        description=(
            f"{PATH_TEMPLATE_DOC} Default: `{{namespace}}/{{group}}/{{resource}}/{{name}}.yaml`."
        ),
        json_schema_extra=cel(
            ("self.endsWith('.yaml')", "must end with .yaml"),
            *RELATIVE_PATH_RULES,
            GIT_NAMES_RULE,
        ),
    )
    types: list[TypePlacement] = Field(
        default_factory=list,
        max_length=256,
        description="Per-type templates; they take precedence over `default`.",
        json_schema_extra=list_map("group", "resource"),
    )


class PruneSpec(ApiModel):
    """What happens to documents of objects that are gone from the cluster."""

    mode: PruneMode = Field(
        "Always",
        description=(
            "Never: documents are never removed. OnEvent: removed when a delete is observed."
            " Always: also removed when a snapshot (start-up, re-list) no longer finds the object."
        ),
    )


class SensitiveType(ApiModel):
    """A resource type whose documents (or parts of them) are encrypted."""

    group: str = Field("", max_length=253, description="API group; empty for the core group.")
    resource: str = Field(min_length=1, max_length=253, description="Plural resource name.")
    paths: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Dot paths of the values to encrypt, e.g. `spec.credentials`.",
    )
    whole_document: bool = Field(False, description="Encrypt every value of the document.")

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "self.wholeDocument || (has(self.paths) && size(self.paths) > 0)",
                "set paths or wholeDocument",
            )
        )
    )


class EncryptionSpec(ApiModel):
    """SOPS (age) encryption of sensitive documents; core `secrets` are always sensitive."""

    recipients: list[AgeRecipient] = Field(
        default_factory=list,
        max_length=64,
        description="age recipients (`age1…`) every sensitive document is encrypted to.",
    )
    age_key_secret_ref: LocalObjectReference | None = Field(
        None,
        description=(
            "Secret in the same namespace whose `*.agekey` entries hold age identities; their"
            " recipients are added to `recipients`."
        ),
    )
    generate_when_missing: bool = Field(
        False,
        description="Generate an age identity into `ageKeySecretRef` when it holds none.",
    )
    sensitive_types: list[SensitiveType] = Field(
        default_factory=list,
        max_length=256,
        description="Further sensitive types, in addition to core `secrets`.",
        json_schema_extra=list_map("group", "resource"),
    )

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "(has(self.recipients) && size(self.recipients) > 0) || has(self.ageKeySecretRef)",
                "needs recipients or ageKeySecretRef",
            ),
            (
                "!self.generateWhenMissing || has(self.ageKeySecretRef)",
                "generateWhenMissing needs ageKeySecretRef",
            ),
        )
    )


_REASON_PATTERN = r"^[a-z0-9]+(-[a-z0-9]+)*$"


class NoiseMatcher(ApiModel):
    """Which objects a noise rule matches: every field set must match (fnmatch globs)."""

    group: str | None = Field(None, max_length=253, description='API group; `""` is core.')
    resource: str | None = Field(None, max_length=253, description="Plural resource name.")
    namespace: str | None = Field(None, max_length=253, description="Object namespace.")
    name: str | None = Field(None, max_length=253, description="Object name.")
    secret_type: str | None = Field(
        None, max_length=253, description="Secret `type` (core Secrets only)."
    )
    controller_owned: bool | None = Field(
        None, description="Only objects with a controller owner reference."
    )
    annotation: str | None = Field(
        None, max_length=512, description="An annotation `key` or `key=value` (globs)."
    )


class NoiseRuleSpec(NoiseMatcher):
    """Objects left out of Git, counted by `reason`."""

    reason: str = Field(
        min_length=1,
        max_length=63,
        pattern=_REASON_PATTERN,
        description="Kebab-case reason (metric label).",
    )


class NoiseKeep(ApiModel):
    """Labels/annotations/finalizers exempt from the strip rules below this entry."""

    key: str = Field(min_length=1, max_length=317, description="Glob on the key or finalizer.")
    on: Literal["labels", "annotations", "both", "finalizers"] = Field(
        "both", description="Where (`both`: labels and annotations)."
    )
    when: str | None = Field(
        None,
        max_length=317,
        description="Only on objects holding a label or annotation key matching this glob.",
    )


class NoiseStrip(NoiseKeep):
    """Labels/annotations/finalizers removed from mirrored documents, counted by `reason`."""

    reason: str = Field(
        min_length=1,
        max_length=63,
        pattern=_REASON_PATTERN,
        description="Kebab-case reason (metric label).",
    )


class NoiseSpec(ApiModel):
    """This target's noise policy, on top of the operator's (first match wins)."""

    disable_defaults: bool = Field(
        False, description="Drop the operator's policy (its defaults included) for this target."
    )
    rules: list[NoiseRuleSpec] = Field(
        default_factory=list, max_length=64, description="More objects to leave out."
    )
    allow: list[NoiseMatcher] = Field(
        default_factory=list,
        max_length=64,
        description="Objects to mirror although the operator's policy leaves them out.",
    )
    strip: list[NoiseStrip] = Field(
        default_factory=list, max_length=64, description="More labels/annotations to remove."
    )
    keep: list[NoiseKeep] = Field(
        default_factory=list,
        max_length=64,
        description="Labels/annotations to keep although the operator's policy removes them.",
    )


CONTROLLER_MANAGERS = ("kube-controller-manager", "horizontal-pod-autoscaler")
_ManagerName = Annotated[str, Field(min_length=1, max_length=128)]


class ContentKeep(ApiModel):
    """A field kept in `Owned` content whoever set it (a server default included)."""

    path: str = Field(
        min_length=1,
        max_length=512,
        pattern=r"^[^.]+(\.[^.]+)*$",
        description=(
            "Dotted field path from the document root, `*` for every list item or map key"
            " (e.g. `spec.template.spec.containers.*.imagePullPolicy`)."
        ),
    )
    group: str = Field("*", max_length=253, description='API group glob; `""` is core.')
    kind: str = Field("*", max_length=253, description="Kind glob.")


class ContentSpec(ApiModel):
    """What each mirrored document holds (docs/content.md)."""

    mode: Literal["Owned", "Full"] = Field(
        "Owned",
        description=(
            "Owned: only the fields some field manager owns (`metadata.managedFields`), so"
            " what the API server defaulted or allocated is left out; an object without"
            " usable managedFields is written in full. Full: the whole object (sanitized)."
        ),
    )
    controllers: list[_ManagerName] = Field(
        default_factory=lambda: list(CONTROLLER_MANAGERS),
        max_length=32,
        description=(
            "Field managers whose fields are left out in Owned content unless another"
            " manager owns them too (e.g. `spec.replicas` of an autoscaled Deployment);"
            " `[]` keeps them."
        ),
        json_schema_extra={"default": list(CONTROLLER_MANAGERS)},
    )
    keep: list[ContentKeep] = Field(
        default_factory=list,
        max_length=64,
        description="Fields kept in Owned content although nobody (or a controller) owns them.",
        json_schema_extra={"default": []},
    )


_Username = Annotated[str, Field(min_length=1, max_length=512)]
_ServiceAccountRef = Annotated[
    str,
    Field(
        min_length=3,
        max_length=317,
        json_schema_extra=cel(
            (
                "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?/"
                "([*]|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$')",
                "must be namespace/name or namespace/* (e.g. flux-system/kustomize-controller)",
            )
        ),
    ),
]


class IgnoreIdentities(ApiModel):
    """Whose changes are not recorded (docs/ignore-identities.md); any match drops a change."""

    users: list[_Username] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "Usernames as the API server authenticates them (e.g. `alice`,"
            " `oidc:alice@example.org`); needs attribution (audit or the change webhook)."
        ),
    )
    service_accounts: list[_ServiceAccountRef] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "ServiceAccounts as `namespace/name`, or `namespace/*` for all of a namespace"
            " (e.g. `flux-system/kustomize-controller`); needs attribution."
        ),
    )
    field_managers: list[_ManagerName] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "Field managers (e.g. `kustomize-controller`, `argocd-controller`): a create or"
            " update whose newest `metadata.managedFields` entry is theirs. Works without"
            " attribution; any client can choose a manager name."
        ),
    )


class IgnoreSpec(ApiModel):
    """Changes this target does not record."""

    changes_by: IgnoreIdentities = defaulted(
        IgnoreIdentities, "Identities whose creates, updates and deletes make no commit."
    )


class KustomizeSpec(ApiModel):
    """Writing through a kustomization in the target folder."""

    mode: Literal["Auto", "Disabled"] = Field(
        "Auto",
        description=(
            "Auto: when `root` holds a kustomization.yaml, changes are written through it (new"
            " files listed in `resources:`, deletes unlisted, `images:`, `replicas:`,"
            " `namespace:` and name prefixes/suffixes honoured). Disabled: plain files only."
        ),
    )
    root: str = Field(
        ".",
        min_length=1,
        max_length=1024,
        description=(
            "Folder, relative to `path`, whose kustomization renders the target (e.g. an"
            " overlay); new documents are placed under it and listed in its `resources:`."
        ),
        json_schema_extra=cel(*RELATIVE_PATH_RULES, GIT_NAMES_RULE),
    )
    write_unsupported: bool = Field(
        False,
        description=(
            "Write an object the operator cannot write through (generated, patched, under"
            " components, Helm charts or remote bases) as a plain file, leaving the"
            " kustomization alone. `RenderMatchesLive` stays False either way."
        ),
    )
    render_check: bool = Field(
        False,
        description=(
            "After each push, render the root with the `kustomize` binary (when the operator"
            " has one, `--kustomize`) and compare the changed objects with the live ones; a"
            " difference is `RenderMatchesLive=False` / `RenderMismatch`. Without a binary the"
            " check cannot run: `RenderMatchesLive=Unknown` / `RenderCheckUnavailable`, and"
            " changes are still written."
        ),
    )


class GitTargetSpec(ApiModel):
    """One folder on one branch of one GitProvider."""

    provider_ref: LocalObjectReference = Field(description="GitProvider in the same namespace.")
    branch: str = Field(
        min_length=1,
        max_length=255,
        description=(
            "Branch to write to (short name, e.g. `main`); must be allowed by the provider."
            " Immutable."
        ),
        json_schema_extra=cel(IMMUTABLE, *BRANCH_RULES),
    )
    base_branch: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        description=(
            "Where `branch` starts when the remote does not have it yet (short name);"
            " default: the remote's default branch (its HEAD)."
        ),
        json_schema_extra=cel(*BRANCH_RULES),
    )
    path: str = Field(
        ".",
        min_length=1,
        max_length=1024,
        description="Folder in the repository, relative, `.` for the root. Immutable.",
        json_schema_extra=cel(IMMUTABLE, *RELATIVE_PATH_RULES, GIT_NAMES_RULE),
    )
    placement: Placement = Field(
        default_factory=Placement, description="Layout of documents inside `path`."
    )
    prune: PruneSpec = defaulted(PruneSpec, "Removal of documents of deleted objects.")
    suspend: bool = Field(False, description="Stop writing; changes are caught up on resume.")
    encryption: EncryptionSpec | None = Field(
        None, description="Encryption of sensitive documents; required to mirror Secrets."
    )
    kustomize: KustomizeSpec = defaulted(
        KustomizeSpec, "Writing through a kustomization.yaml in the folder (Flux, Argo CD)."
    )
    content: ContentSpec = defaulted(
        ContentSpec, "What each document holds: the fields people wrote (Owned) or all (Full)."
    )
    noise: NoiseSpec | None = Field(
        None,
        description=(
            "Extend or override the noise policy (objects left out, bookkeeping labels and"
            " annotations removed) for this target."
        ),
    )
    ignore: IgnoreSpec | None = Field(
        None,
        description=(
            "Drop changes made by chosen users, ServiceAccounts or field managers (a GitOps"
            " tool's own writes), so the mirror records only out-of-band changes."
        ),
    )


class EncryptionStatus(ApiModel):
    """Encryption in effect."""

    recipients: list[str] = Field(
        default_factory=list, description="Effective age recipients (spec and key Secret)."
    )


class GitTargetStatus(Status):
    """Observed state of a GitTarget."""

    last_commit: str | None = Field(None, description="SHA of the last pushed commit.")
    last_push_time: AwareDatetime | None = Field(None, description="Time of the last push.")
    documents: int | None = Field(None, ge=0, description="Documents in the target folder.")
    retained_documents: int | None = Field(
        None,
        ge=0,
        description="Documents kept by the prune mode although their object is gone.",
    )
    streams: int | None = Field(None, ge=0, description="Watch streams feeding this target.")
    encryption: EncryptionStatus | None = Field(None, description="Encryption in effect.")
    owner: str | None = Field(
        None,
        max_length=253,
        description="Replica that writes this target (when replicas share the work).",
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
