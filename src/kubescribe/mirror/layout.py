"""Where a document lives in the target folder: default layout and per-type path templates."""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field

from kubescribe.gitnames import escape_segment, has_reserved_segment
from kubescribe.mirror.identity import CLUSTER_SCOPE, CORE_GROUP, Identity, ResourceType
from kubescribe.mirror.messages import field_problem

DEFAULT_TEMPLATE = "{namespace}/{group}/{resource}/{name}.yaml"
TEMPLATE_FIELDS = frozenset(
    {"cluster", "namespace", "group", "version", "kind", "resource", "name"}
)
LOCAL_CLUSTER = "local"  # `{cluster}` of the operator's own cluster
ENCRYPTED_SUFFIX = ".sops.yaml"


class LayoutError(ValueError):
    """A path template or target path is not usable."""


def validate_template(template: str) -> None:
    """Reject templates with unknown fields, format specs, absolute paths, `..` or a segment
    Git refuses (`.git`, `git~1`, …)."""
    problem = field_problem(template, TEMPLATE_FIELDS)
    if problem is not None:
        raise LayoutError(problem)
    if not template.endswith(".yaml"):
        raise LayoutError(f"template {template!r} must end with .yaml")
    if template.startswith("/") or ".." in template.split("/"):
        raise LayoutError(f"template {template!r} must be relative and must not contain '..'")
    if has_reserved_segment(template):
        raise LayoutError(f"template {template!r} has a segment Git refuses (like .git)")


def normalize_target_path(path: str) -> str:
    """The target folder as a clean relative POSIX path; '' for the repository root."""
    if path.startswith("/"):
        raise LayoutError(f"path {path!r} must be relative")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise LayoutError(f"path {path!r} must not contain '..'")
    if has_reserved_segment(path):
        raise LayoutError(f"path {path!r} has a segment Git refuses (like .git)")
    return "/".join(parts)


def paths_overlap(a: str, b: str) -> bool:
    """Two target folders overlap when one contains the other (the root contains every folder)."""
    if not a or not b:
        return True
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


@dataclass(frozen=True)
class Layout:
    """Renders the file path (relative to the target folder) of a new document."""

    default: str = DEFAULT_TEMPLATE
    per_type: Mapping[tuple[str, str], str] = field(default_factory=dict)
    cluster: str = LOCAL_CLUSTER  # the target's source cluster (one per target)

    def __post_init__(self) -> None:
        validate_template(self.default)
        for template in self.per_type.values():
            validate_template(template)

    def path_for(self, identity: Identity, rtype: ResourceType, *, encrypted: bool = False) -> str:
        template = self.per_type.get((rtype.group, rtype.resource), self.default)
        path = template.format(
            cluster=_segment(self.cluster),
            namespace=_segment(identity.namespace or CLUSTER_SCOPE),
            group=_segment(rtype.group or CORE_GROUP),
            version=_segment(rtype.version),
            kind=_segment(identity.kind),
            resource=_segment(rtype.resource),
            name=file_name(identity.name),
        )
        # Object names may spell `.git` or an alias of it: such a segment gets a `_` prefix.
        path = "/".join(escape_segment(s) for s in posixpath.normpath(path).split("/"))
        if encrypted and not path.endswith(ENCRYPTED_SUFFIX):
            path = path.removesuffix(".yaml") + ENCRYPTED_SUFFIX
        return path


# Characters Windows refuses in a file name, and `%` and `~` so the mapping stays one-to-one
# (`~` separates the stable suffix). Kubernetes names never hold `/` or `%`, but RBAC names may
# hold almost anything else (`system:controller:x`).
_UNSAFE = frozenset('<>:"\\|?*%~')
# Names Windows reserves for devices, with any extension.
_DEVICES = frozenset(
    ["con", "prn", "aux", "nul"] + [f"{d}{i}" for d in ("com", "lpt") for i in "0123456789"]
)
# A file name is at most 255 bytes on common file systems; leave room for `.sops.yaml`
# and whatever a template adds around `{name}`.
MAX_NAME_BYTES = 200
_SUFFIX_HEX = 12
_SOPS = ENCRYPTED_SUFFIX.removesuffix(".yaml")


def file_name(name: str) -> str:
    """The file-name form of an object name, one a clone can check out anywhere.

    Characters Windows refuses, control characters, non-ASCII characters, `%` and `~` are
    percent-encoded (UTF-8, upper-case hex), and so is the dot of a trailing `.sops`, so no
    name can spell the encrypted suffix (`db.sops` and `db` keep files of their own). A name
    that could collide with another on a case-insensitive file system (it holds an upper-case
    letter), a Windows device name, a name ending in `.` or space, and one longer than
    `MAX_NAME_BYTES` after encoding get a stable suffix `~` + the first 12 hex digits of the
    SHA-256 of the exact name (long names are cut first). Lower-case ASCII names without
    those characters stay as they are.
    """
    if name in ("", ".", ".."):
        return f"_{name}_"
    out: list[str] = []
    for char in name:
        if char in _UNSAFE or ord(char) < 0x20 or ord(char) >= 0x7F:
            out.extend(f"%{b:02X}" for b in char.encode())
        else:
            out.append(char)
    encoded = "".join(out)
    if encoded.endswith(_SOPS):  # else `db.sops` would take `db`'s encrypted file
        encoded = encoded.removesuffix(_SOPS) + "%2Esops"
    needs_suffix = (
        name.lower() != name
        or len(encoded) > MAX_NAME_BYTES
        or encoded.split(".")[0].lower() in _DEVICES
        or encoded[-1] in ". "
    )
    if not needs_suffix:
        return encoded
    digest = hashlib.sha256(name.encode()).hexdigest()[:_SUFFIX_HEX]
    head = encoded[: MAX_NAME_BYTES - _SUFFIX_HEX - 1]
    if "%" in head[-2:]:
        head = head[: head.rfind("%")]  # never cut an escape in half
    return f"{head}~{digest}"


def _segment(value: str) -> str:
    """Object names may contain ':' (RBAC) but never '/'; keep them readable and safe."""
    return value.replace("/", "_") if value not in ("", ".", "..") else f"_{value}_"
