"""What a branch worker writes for each target: its configuration, how documents render, and
who commits (the records it reports with are in `git.records`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kubescribe.mirror import messages
from kubescribe.mirror.authors import AttributionMode
from kubescribe.mirror.changes import PruneMode, TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.ignore import NO_IGNORE, IgnoreRule
from kubescribe.mirror.layout import Layout, normalize_target_path
from kubescribe.mirror.window import WindowPolicy
from kubescribe.mirror.yamlfmt import dump_yaml, order_document

# The reasons the build and the worker report, from the catalogue (`api/conditions.py`).
SOPS_CONFIG = ".sops.yaml"

RETRY_INITIAL = 0.5
RETRY_MAX = 30.0
RETRY_MAX_UNREACHABLE = 3.0


class RefusedContent(Exception):
    """Raised by a renderer: this document must not be written (e.g. no encryption)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Renderer(Protocol):
    def encrypted(self, rtype: ResourceType) -> bool:
        """Whether documents of this type are written encrypted (`.sops.yaml`)."""
        ...

    def render(
        self,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
        previous: bytes | None,
    ) -> bytes:
        """The file's bytes. `previous` is the current file of the same kind (plain or
        encrypted), if any, so unchanged ciphertext can stay byte-identical."""
        ...


@runtime_checkable
class Encrypting(Protocol):
    """What a renderer that encrypts adds, so the worker keeps the target folder in step with
    its recipients: `<folder>/.sops.yaml`, and files encrypted for other recipients are
    re-encrypted (one commit that says so) before anything else of the batch is written."""

    @property
    def recipients(self) -> tuple[str, ...]: ...

    def sops_config(self, current: bytes | None) -> bytes | None:
        """What `<folder>/.sops.yaml` should hold given its `current` content (None when
        missing); None to leave it alone."""
        ...

    def recipients_of(self, data: bytes) -> frozenset[str] | None:
        """The recipients an encrypted file is readable by; None: not one to re-encrypt."""
        ...

    def rekey(self, identity: Identity, data: bytes) -> bytes:
        """The file's content encrypted for `recipients` (or `RefusedContent`)."""
        ...


def upkeep_key(config: TargetConfig | None) -> tuple[str, tuple[str, ...], bytes | None] | None:
    renderer = config.renderer if config is not None else None
    if config is None or not isinstance(renderer, Encrypting) or not renderer.recipients:
        return None
    return config.folder, tuple(sorted(renderer.recipients)), renderer.sops_config(None)


class PlainRenderer:
    """Canonical YAML, never encrypted."""

    def encrypted(self, rtype: ResourceType) -> bool:
        return False

    def render(
        self,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
        previous: bytes | None,
    ) -> bytes:
        return dump_yaml(order_document(document)).encode()


@dataclass(frozen=True)
class KustomizeConfig:
    """Writing through the kustomization at `root` (relative to the target folder).

    `write_unsupported`: an object the operator cannot write through is written the plain
    way (its file, the kustomization left alone) instead of not at all. `render_check`: the
    path of a `kustomize` binary; after each build the changed objects are rendered with it
    and compared with the live ones. `render_check_unavailable`: the target asks for the check
    but the operator has no binary, so it cannot run (counted, and reported in status)."""

    root: str = ""
    write_unsupported: bool = False
    render_check: str | None = None
    render_check_unavailable: bool = False


@dataclass(frozen=True)
class TargetConfig:
    key: TargetKey
    folder: str
    layout: Layout
    prune: PruneMode
    renderer: Renderer
    change_template: str = messages.DEFAULT_CHANGE_TEMPLATE
    snapshot_template: str = messages.DEFAULT_SNAPSHOT_TEMPLATE
    group_template: str = messages.DEFAULT_GROUP_TEMPLATE
    window: WindowPolicy = field(default_factory=WindowPolicy)
    attribution: AttributionMode = AttributionMode.CONFIGURED
    infer_authors: bool = False  # attributed-author: the field manager when nothing else names one
    kustomize: KustomizeConfig | None = None
    base_branch: str | None = None  # where a branch missing on the remote starts
    ignore: IgnoreRule = NO_IGNORE  # changes dropped by who made them (spec.ignore)
    # The folder on this branch the target was written to before its path changed: under
    # prune Always, its documents go in the target's next snapshot commit.
    moved_from: str | None = None
    commit_url: str | None = None  # the template of a commit's web page (net.weblinks)

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", normalize_target_path(self.folder))
        messages.validate(self.change_template, messages.CHANGE_FIELDS)
        messages.validate(self.snapshot_template, messages.SNAPSHOT_FIELDS)
        messages.validate(self.group_template, messages.GROUP_FIELDS)


@dataclass(frozen=True)
class Committer:
    name: str
    email: str

    def __post_init__(self) -> None:
        for value in (self.name, self.email):
            if not value.strip() or any(c in value for c in "<>\n"):
                raise ValueError(f"invalid commit identity {value!r}")
