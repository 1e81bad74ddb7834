"""Models of the GitTarget kind: one folder on one branch of a GitProvider, and its status."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, ConfigDict, Field

from kubescribe.api.schema import (
    BRANCH_RULES,
    DURATION_PATTERN,
    GIT_NAMES_RULE,
    PATH_TEMPLATE_DOC,
    RELATIVE_PATH_RULES,
    AgeRecipient,
    ApiModel,
    LocalObjectReference,
    Status,
    cel,
    defaulted,
    duration_rule,
    list_map,
)

PruneMode = Literal["Never", "OnEvent", "Always"]


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
            " overlay); new documents are placed under it (or under the kustomization of its"
            " app directory that holds their siblings) and listed in its `resources:`. With"
            " `.` and no kustomization in the folder, the kustomizations of its app"
            " directories are roots of their own (see `status.placement`)."
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


_Template = Annotated[str, Field(min_length=1, max_length=4096)]


class TargetMessages(ApiModel):
    """Message templates of this target only; an unset one is the GitProvider's."""

    change: _Template | None = Field(None, description="As the GitProvider's `change` template.")
    snapshot: _Template | None = Field(None, description="As its `snapshot` template.")
    group: _Template | None = Field(None, description="As its `group` template.")


class TargetCommitSpec(ApiModel):
    """Commit window and messages of this target; each unset field is the GitProvider's."""

    commit_window: str | None = Field(
        None,
        max_length=32,
        pattern=DURATION_PATTERN,
        description=(
            "This target's commit window (the GitProvider's `push.commitWindow` otherwise)."
            " Windows are per target, so targets sharing a branch each keep their own."
        ),
        json_schema_extra=duration_rule("1h"),
    )
    max_changes_per_commit: int | None = Field(
        None, ge=1, le=10000, description="As the GitProvider's `push.maxChangesPerCommit`."
    )
    message: TargetMessages | None = Field(None, description="Message templates.")


class GitTargetSpec(ApiModel):
    """One folder on one branch of one GitProvider."""

    provider_ref: LocalObjectReference = Field(description="GitProvider in the same namespace.")
    branch: str = Field(
        min_length=1,
        max_length=255,
        description=(
            "Branch to write to (short name, e.g. `main`); must be allowed by the provider."
            " A change moves the mirror there (see `status.observedDestination`)."
        ),
        json_schema_extra=cel(*BRANCH_RULES),
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
        description=(
            "Folder in the repository, relative, `.` for the root. A change moves the mirror"
            " there (a snapshot commit per watched type); under prune `Always` on the same"
            " branch each type's documents leave the old folder in that commit, otherwise the"
            " old files stay."
        ),
        json_schema_extra=cel(*RELATIVE_PATH_RULES, GIT_NAMES_RULE),
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
    commit: TargetCommitSpec | None = Field(
        None,
        description=(
            "Commit window and message templates of this target, overriding the GitProvider's"
            " field by field (other targets of the provider keep its values)."
        ),
    )


class EncryptionStatus(ApiModel):
    """Encryption in effect."""

    recipients: list[str] = Field(
        default_factory=list, description="Effective age recipients (spec and key Secret)."
    )


class BaseBranchStatus(ApiModel):
    """The base branch as the operator last fetched it, once the write branch exists."""

    name: str = Field(
        max_length=255, description="`spec.baseBranch`, or the remote's default branch."
    )
    commit: str | None = Field(
        None, max_length=64, description="Its tip when last fetched (`''`: the remote lacks it)."
    )
    observed_time: AwareDatetime | None = Field(None, description="When it was last fetched.")
    write_branch_descends: bool | None = Field(
        None,
        description=(
            "Whether the write branch's tip is that commit or a descendant of it (false: the"
            " base moved on, e.g. merged work the write branch lacks, or was rewritten, or the"
            " remote lacks it)."
        ),
    )


class DestinationStatus(ApiModel):
    """Where the mirror is written."""

    branch: str = Field(max_length=255, description="The branch.")
    path: str = Field(max_length=1024, description="The folder.")


class RootPlacementStatus(ApiModel):
    """A kustomization new objects may be listed in, and what it renders."""

    kustomization: str = Field(max_length=1024, description="Its file, relative to `spec.path`.")
    documents: int = Field(ge=0, description="Documents of the folder it renders.")
    kinds: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Their kinds (`Deployment.apps`, `ConfigMap`; the first 64).",
    )


class InheritedPlacementStatus(ApiModel):
    """Documents an overlay root inherits from a base reached through `..` (read-only)."""

    documents: int = Field(0, ge=0, description="How many documents are inherited.")
    objects: list[str] = Field(
        default_factory=list, max_length=64, description="The first 64, sorted (`Kind ns/name`)."
    )


class PlacementStatus(ApiModel):
    """How the operator understood a kustomized folder: where each object is written."""

    forest: bool = Field(
        description=(
            "No root kustomization: each app directory's kustomization is rendered on its own,"
            " and a document none renders is a plain file."
        )
    )
    roots: list[RootPlacementStatus] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "The kustomizations a new object may be listed in (the root and those under its"
            " directory, not bases reached through `..`), by path (the first 64)."
        ),
    )
    plain_documents: int = Field(
        0, ge=0, description="Documents no kustomization renders (plain files of a forest)."
    )
    root: str | None = Field(None, description="The root kustomization (unset in a forest).")
    inherited: InheritedPlacementStatus | None = Field(
        None, description="Documents defined in a base reached through `..` (read-only)."
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
    base_branch: BaseBranchStatus | None = Field(
        None,
        description=(
            "The base branch, observed whenever the writer fetches the remote (at start, after"
            " a moved remote or a failure, on `kubescribe.io/reconcile-at`)."
        ),
    )
    observed_destination: DestinationStatus | None = Field(
        None,
        description=(
            "Where the mirror is written now: `spec.branch` and `spec.path` once a change of"
            " them has been moved there (every stream listed again and pushed), the old"
            " destination until then."
        ),
    )
    encryption: EncryptionStatus | None = Field(None, description="Encryption in effect.")
    placement: PlacementStatus | None = Field(
        None,
        description=(
            "Where objects are written in a kustomized folder (`spec.kustomize`): the"
            " kustomizations that render it and the documents of each."
        ),
    )
    owner: str | None = Field(
        None,
        max_length=253,
        description="Replica that writes this target (when replicas share the work).",
    )
