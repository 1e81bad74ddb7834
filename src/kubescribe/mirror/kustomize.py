"""Kustomizations: what a folder's `kustomization.yaml` does to the documents it lists, and how
a live object is written through it so that `kustomize build` of the folder renders it.

Pure: files come in as bytes through a `read` callable and go out as bytes. The rules follow
kustomize v5 (sigs.k8s.io/kustomize/api): `namespace`, `namePrefix`/`nameSuffix`, `images`
(the image tag transformer: every `containers`/`initContainers` list) and `replicas` are written
through; constructs the operator does not invert (generators, components, patches that touch the
object, remote bases, Helm charts, other transformers) are reported, never guessed at.

Comments and key order of a kustomization survive edits (ruamel.yaml round-trip). A file is
read within bounds (size, nesting, no aliases, checked by `boundedyaml`; a tree of limited depth
and size), and no resource of the target's folder may name a file outside it: a kustomization
written by whoever writes the repository decides neither the operator's memory nor another
folder.
"""

from __future__ import annotations

import io
import posixpath
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

from kubescribe.mirror import boundedyaml
from kubescribe.mirror.identity import Identity

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")

# Keys that change every object of a kustomization in ways not written through.
_FOLDER_WIDE = {
    "components": "components",
    "helmCharts": "helmCharts",
    "helmGlobals": "helmCharts",
    "helmChartInflationGenerator": "helmCharts",
    "generators": "generators",
    "transformers": "transformers",
    "validators": "validators",
    "replacements": "replacements",
    "vars": "vars",
    "configurations": "configurations",
    "crds": "crds",
    "openapi": "openapi",
}
# Where kustomize's label and annotation transformers write (kustomize/api konfig
# builtinpluginconsts): (kinds or None for every kind, path, create the map when missing).
FieldSpec = tuple[frozenset[str] | None, tuple[str, ...], bool]
_WORKLOADS = frozenset({"Deployment", "ReplicaSet", "DaemonSet", "StatefulSet"})
_TEMPLATE_KINDS = _WORKLOADS | {"Job", "ReplicationController"}
_TEMPLATE = ("spec", "template", "metadata")
_JOB_TEMPLATE = ("spec", "jobTemplate")
META_LABELS: list[FieldSpec] = [(None, ("metadata", "labels"), True)]
TEMPLATE_LABELS: list[FieldSpec] = [
    (_TEMPLATE_KINDS, (*_TEMPLATE, "labels"), True),
    (frozenset({"CronJob"}), (*_JOB_TEMPLATE, "metadata", "labels"), True),
    (frozenset({"CronJob"}), (*_JOB_TEMPLATE, *_TEMPLATE, "labels"), True),
]
SELECTORS: list[FieldSpec] = [
    (frozenset({"Service", "ReplicationController"}), ("spec", "selector"), True),
    (_WORKLOADS, ("spec", "selector", "matchLabels"), True),
    (frozenset({"Job", "PodDisruptionBudget"}), ("spec", "selector", "matchLabels"), False),
    (frozenset({"CronJob"}), (*_JOB_TEMPLATE, "spec", "selector", "matchLabels"), False),
    (frozenset({"NetworkPolicy"}), ("spec", "podSelector", "matchLabels"), False),
]
ANNOTATIONS: list[FieldSpec] = [
    (None, ("metadata", "annotations"), True),
    (_TEMPLATE_KINDS, (*_TEMPLATE, "annotations"), True),
    (frozenset({"CronJob"}), (*_JOB_TEMPLATE, "metadata", "annotations"), True),
    (frozenset({"CronJob"}), (*_JOB_TEMPLATE, *_TEMPLATE, "annotations"), True),
]
_GENERATORS = {"configMapGenerator": "ConfigMap", "secretGenerator": "Secret"}
_PATCHES = ("patches", "patchesStrategicMerge", "patchesJson6902")
REPLICA_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "ReplicationController"})
# kyaml's built-in cluster-scoped kinds; kustomize treats every other kind as namespaced.
_CLUSTER_KINDS = frozenset(
    {
        "APIService",
        "CertificateSigningRequest",
        "ClusterRole",
        "ClusterRoleBinding",
        "ComponentStatus",
        "CSIDriver",
        "CSINode",
        "CustomResourceDefinition",
        "FlowSchema",
        "IngressClass",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PodSecurityPolicy",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "RuntimeClass",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
    }
)
_REMOTE = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*://|git::|git@|github\.com/|gitlab\.com/|bitbucket\.org/)",
    re.IGNORECASE,
)
_FILE_SUFFIXES = (".yaml", ".yml", ".json")
_REGEX = re.compile(r"[\^$*+?()\[\]{}|\\]")  # a patch target name that is a pattern
_HASH_SUFFIX = re.compile(r"-[a-z0-9]{10}$")
TAG = re.compile(r"(@sha256)?(:[a-zA-Z0-9_.{}-]*)?")


# Bounds of what is read: kustomizations are small, shallow files in a shallow tree.
MAX_BYTES = 1024 * 1024
MAX_NESTING = 64  # nested maps and lists
MAX_BASES_DEPTH = 32
MAX_KUSTOMIZATIONS = 512
MAX_TREE_BYTES = 4 * MAX_BYTES  # all the kustomizations of a tree together


class KustomizeError(ValueError):
    """A kustomization that cannot be read (not YAML, not a mapping, past a bound)."""


def _within_bounds(path: str, text: str | bytes) -> None:
    """Refuse a file past the size or nesting bound, or with aliases, on the parser's events
    (`boundedyaml`), before it is composed: composing recurses as deep as the text nests."""
    try:
        boundedyaml.check(text, max_bytes=MAX_BYTES, max_depth=MAX_NESTING, aliases=False)
    except (boundedyaml.RefusedYaml, yaml.YAMLError) as exc:
        raise KustomizeError(f"{path}: {exc}") from exc


def _yaml() -> YAML:
    y = YAML()  # round-trip
    y.preserve_quotes = True
    y.width = 4096
    return y


def kustomization_at(
    read: Callable[[str], bytes | None], directory: str
) -> tuple[str, bytes] | None:
    """The path and content of the kustomization file of `directory`, if it has one."""
    for name in KUSTOMIZATION_FILES:
        path = posixpath.join(directory, name) if directory else name
        data = read(path)
        if data is not None:
            return path, data
    return None


def _sequence_style(text: str) -> tuple[int, int]:
    """(sequence indent, dash offset) as the file writes its lists: `- x` under a key at
    the same column, or indented by two."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if re.fullmatch(r"[A-Za-z][\w.-]*:\s*(#.*)?", line):
            nxt = next(
                (n for n in lines[i + 1 :] if n.strip() and not n.lstrip().startswith("#")), ""
            )
            if nxt.startswith("- "):
                return 2, 0
            if nxt.startswith("  - "):
                return 4, 2
    return 2, 0


@dataclass
class Kustomization:
    """One kustomization file, parsed with comments."""

    path: str
    data: CommentedMap
    style: tuple[int, int] = (2, 0)

    @property
    def dir(self) -> str:
        return posixpath.dirname(self.path)

    @classmethod
    def parse(cls, path: str, raw: bytes) -> Kustomization:
        _within_bounds(path, raw)
        try:
            text = raw.decode()
            data = _yaml().load(text)
        except (YAMLError, UnicodeDecodeError) as exc:
            raise KustomizeError(f"{path}: {exc}") from exc
        if data is None:
            data = CommentedMap()
        if not isinstance(data, CommentedMap):
            raise KustomizeError(f"{path}: not a mapping")
        return cls(path, data, _sequence_style(text))

    def dump(self) -> bytes:
        y = _yaml()
        y.indent(mapping=2, sequence=self.style[0], offset=self.style[1])
        out = io.StringIO()
        y.dump(self.data, out)
        return out.getvalue().encode()

    def copy(self) -> Kustomization:
        # A round trip through text: deep copies of ruamel's comment-carrying nodes are
        # an order of magnitude slower.
        copied = Kustomization.parse(self.path, self.dump())
        copied.style = self.style
        return copied

    def str_value(self, key: str) -> str:
        value = self.data.get(key)
        return value if isinstance(value, str) else ""

    def entries(self, key: str) -> list[Any]:
        value = self.data.get(key)
        return list(value) if isinstance(value, list) else []

    def resources(self) -> list[str]:
        return [r for k in ("resources", "bases") for r in self.entries(k) if isinstance(r, str)]

    # -- edits ----------------------------------------------------------------------------
    def add_resource(self, entry: str) -> None:
        self.add_resources([entry])

    def add_resources(self, entries: list[str]) -> None:
        """Insert each entry into `resources:` before the first entry that sorts after it
        (in one pass: a snapshot may list thousands); comments stay with their entries."""
        seq = self.data.get("resources")
        if not isinstance(seq, CommentedSeq):
            seq = CommentedSeq()
            self.data["resources"] = seq
        new = sorted(set(entries).difference(v for v in seq if isinstance(v, str)))
        if not new:
            return
        merged: list[Any] = []
        moved: dict[int, int] = {}
        j = 0
        for i, value in enumerate(seq):
            while j < len(new) and isinstance(value, str) and value > new[j]:
                merged.append(new[j])
                j += 1
            moved[i] = len(merged)
            merged.append(value)
        merged.extend(new[j:])
        comments = dict(seq.ca.items)
        list.clear(seq)
        list.extend(seq, merged)
        seq.ca.items.clear()
        seq.ca.items.update((moved[i], c) for i, c in comments.items() if i in moved)

    def remove_resource(self, entry: str) -> bool:
        for key in ("resources", "bases"):
            seq = self.data.get(key)
            if isinstance(seq, list) and entry in seq:
                del seq[seq.index(entry)]
                return True
        return False

    def rename_resource(self, old: str, new: str) -> bool:
        for key in ("resources", "bases"):
            seq = self.data.get(key)
            if isinstance(seq, list) and old in seq:
                i = seq.index(old)
                seq[i] = like_old(seq[i], new)
                return True
        return False


def like_old(old: Any, new: str) -> Any:
    """`new` in the quoting style of the scalar it replaces."""
    if isinstance(old, DoubleQuotedScalarString):
        return DoubleQuotedScalarString(new)
    if isinstance(old, SingleQuotedScalarString):
        return SingleQuotedScalarString(new)
    return new


def _patches_of(
    k: Kustomization, read: Callable[[str], bytes | None], files: set[str]
) -> list[tuple[str | None, str | None, str]]:
    """What each patch of `k` targets: its `target:` (kind, name), or for a strategic-merge
    patch without one, the kind and name of each of its documents. Unknown: any object."""
    out: list[tuple[str | None, str | None, str]] = []
    for key in _PATCHES:
        what = f"{key} in {k.path}"
        for patch in k.entries(key):
            target = patch.get("target") if isinstance(patch, Mapping) else None
            if isinstance(target, Mapping):
                if any(target.get(s) for s in ("labelSelector", "annotationSelector")):
                    out.append((None, None, what))
                    continue
                kind, name = target.get("kind"), target.get("name")
                out.append(
                    (
                        kind if isinstance(kind, str) else None,
                        name if isinstance(name, str) and not _REGEX.search(name) else None,
                        what,
                    )
                )
                continue
            text: str | bytes | None = None
            if isinstance(patch, Mapping):
                if isinstance(patch.get("patch"), str):
                    text = patch["patch"]
                elif isinstance(patch.get("path"), str):
                    path = posixpath.normpath(posixpath.join(k.dir, patch["path"]))
                    files.add(path)
                    text = read(path)
            elif isinstance(patch, str) and "\n" in patch:
                text = patch
            elif isinstance(patch, str):
                path = posixpath.normpath(posixpath.join(k.dir, patch))
                files.add(path)
                text = read(path)
            out += [(kind, name, what) for kind, name in _patch_documents(text)]
    return out


def _patch_documents(text: str | bytes | None) -> list[tuple[str | None, str | None]]:
    """(kind, name) of each document of a strategic-merge patch; (None, None) if unknown."""
    if text is None:
        return [(None, None)]
    try:
        _within_bounds("patch", text if isinstance(text, bytes) else str(text))
        docs = [d for d in YAML(typ="safe", pure=True).load_all(text) if d is not None]
    except (YAMLError, UnicodeDecodeError, ValueError):
        return [(None, None)]
    out: list[tuple[str | None, str | None]] = []
    for doc in docs:
        meta = doc.get("metadata") if isinstance(doc, Mapping) else None
        kind = doc.get("kind") if isinstance(doc, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(kind, str) or not isinstance(name, str):
            return [(None, None)]  # a JSON 6902 list, or no identity: assume any object
        out.append((kind, name))
    return out or [(None, None)]


def is_remote(entry: str) -> bool:
    return _REMOTE.match(entry) is not None or "?ref=" in entry


def _strings(node: Any) -> Iterator[str]:
    """Every string value in a parsed document (keys excepted)."""
    stack = [node]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def build_refusal(path: str, raw: bytes) -> str | None:
    """Why `kustomize build` must not be given the kustomization file `path` (relative to the
    folder it builds), or None: not readable within the bounds, a remote reference anywhere
    in it (kustomize would fetch it from the operator's Pod), or a base outside the folder."""
    try:
        k = Kustomization.parse(path, raw)
    except KustomizeError:
        return f"{path} is not readable"
    if any(is_remote(value.strip()) for value in _strings(k.data)):
        return f"{path} names a remote resource"
    for entry in [*k.resources(), *k.entries("components")]:
        target = posixpath.normpath(posixpath.join(k.dir, str(entry)))
        if target == ".." or target.startswith(("../", "/")):
            return f"{path} names a resource outside the folder"
    return None


@dataclass
class Tree:
    """The kustomizations reachable from a root, and which one lists each document file.

    `parents[dir]` is the kustomization that includes the kustomization of `dir` as a
    resource (the root has none); `listed[path]` the kustomization whose `resources:` names
    the file. `problems` are kustomization-wide constructs, by directory."""

    root: str
    kustomizations: dict[str, Kustomization] = field(default_factory=dict)
    parents: dict[str, str] = field(default_factory=dict)
    listed: dict[str, str] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    pending: dict[str, list[str]] = field(default_factory=dict)  # resources to add, by dir
    # (kind, name) each patch of a kustomization hits (None: any), and how to name it.
    patches: dict[str, list[tuple[str | None, str | None, str]]] = field(default_factory=dict)
    patch_files: set[str] = field(default_factory=set)  # they look like objects, but are not
    folder: str = ""  # the target's folder: no resource is read or edited outside it
    size: int = 0  # bytes of the kustomizations read

    @classmethod
    def load(cls, root: str, read: Callable[[str], bytes | None], folder: str = "") -> Tree | None:
        """The tree of `root` (in `folder`); None when `root` holds no kustomization."""
        found = kustomization_at(read, root)
        if found is None:
            return None
        tree = cls(root, folder=folder)
        tree._add(tree._parse(*found), None, read)
        return tree

    def _parse(self, path: str, raw: bytes) -> Kustomization:
        self.size += len(raw)
        if self.size > MAX_TREE_BYTES:
            raise KustomizeError(f"{path}: the kustomizations exceed {MAX_TREE_BYTES} bytes")
        return Kustomization.parse(path, raw)

    def inside(self, path: str) -> bool:
        """Whether a normalized repository path is in the target's folder."""
        if path == ".." or path.startswith(("../", "/")):
            return False
        return not self.folder or path == self.folder or path.startswith(self.folder + "/")

    def _add(
        self, k: Kustomization, parent: str | None, read: Callable[[str], bytes | None]
    ) -> None:
        directory = k.dir
        if len(self.kustomizations) >= MAX_KUSTOMIZATIONS:
            raise KustomizeError(f"{k.path}: more than {MAX_KUSTOMIZATIONS} kustomizations")
        if parent is not None and len(self.chain(parent)) >= MAX_BASES_DEPTH:
            raise KustomizeError(f"{k.path}: bases nested deeper than {MAX_BASES_DEPTH}")
        self.kustomizations[directory] = k
        if parent is not None:
            self.parents[directory] = parent
        problems = self.problems.setdefault(directory, [])
        problems += sorted({v for key, v in _FOLDER_WIDE.items() if k.data.get(key)})
        if any(isinstance(e, Mapping) and e.get("fields") for e in k.entries("labels")):
            problems.append("labels with fields")
        self.patches[directory] = _patches_of(k, read, self.patch_files)
        for entry in k.resources():
            if is_remote(entry):
                problems.append(f"remote resource {entry}")
                continue
            path = (
                posixpath.normpath(posixpath.join(directory, entry))
                if directory
                else (posixpath.normpath(entry))
            )
            if not self.inside(path):
                problems.append(f"resource {entry} outside the target folder")
                continue
            if path.endswith(_FILE_SUFFIXES):
                self.listed.setdefault(path, directory)  # a file: no kustomization to look for
                continue
            sub = kustomization_at(read, "" if path == "." else path)
            if sub is not None:
                subdir = posixpath.dirname(sub[0])
                if subdir in self.kustomizations:
                    continue  # a base included twice (diamond): rendered through the first
                self._add(self._parse(*sub), directory, read)
            else:
                self.listed.setdefault(path, directory)

    # -- chains ---------------------------------------------------------------------------
    def chain(self, directory: str) -> list[Kustomization]:
        """The kustomizations from `directory`'s up to the root, innermost first."""
        out: list[Kustomization] = []
        current: str | None = directory
        while current is not None:
            out.append(self.kustomizations[current])
            current = self.parents.get(current)
        return out

    def chain_of(self, path: str) -> list[Kustomization] | None:
        lister = self.listed.get(path)
        return None if lister is None else self.chain(lister)

    def files(self) -> Iterator[str]:
        return iter(self.listed)

    def rendered_identity(self, path: str, identity: Identity) -> Identity | None:
        """The identity `kustomize build` gives the document of file `path` (listed); None
        for a patch file, which holds no object of its own."""
        if path in self.patch_files:
            return None
        chain = self.chain_of(path)
        if chain is None:
            return identity
        return render_identity(identity, chain)

    def relative(self, k: Kustomization, path: str) -> str:
        return posixpath.relpath(path, k.dir or ".")

    def add_file(self, path: str, home: str) -> str:
        """List a new document file in the kustomization of `home` (see `flush`); returns it."""
        self.pending.setdefault(home, []).append(self.relative(self.kustomizations[home], path))
        self.listed[path] = home
        return home

    def flush(self, directory: str) -> Kustomization:
        """The kustomization of `directory` with the files listed since the last flush."""
        k = self.kustomizations[directory]
        added = self.pending.pop(directory, None)
        if added:
            k.add_resources(added)
        return k

    def remove_file(self, path: str) -> str | None:
        """Unlist a document file; returns the directory of the kustomization edited."""
        lister = self.listed.pop(path, None)
        if lister is None:
            return None
        k = self.flush(lister)
        return lister if k.remove_resource(self.relative(k, path)) else None

    def move_file(self, old: str, new: str) -> str | None:
        lister = self.listed.pop(old, None)
        if lister is None:
            return None
        self.listed[new] = lister
        k = self.flush(lister)
        return lister if k.rename_resource(self.relative(k, old), self.relative(k, new)) else None

    def replace(self, k: Kustomization) -> None:
        """An edited copy (images, replicas) is now the tree's kustomization."""
        added = self.pending.pop(k.dir, None)
        if added:
            k.add_resources(added)
        self.kustomizations[k.dir] = k


def namespaced(identity: Identity) -> bool:
    return identity.kind not in _CLUSTER_KINDS


def chain_affixes(chain: list[Kustomization]) -> tuple[str, str]:
    prefix = "".join(k.str_value("namePrefix") for k in reversed(chain))
    suffix = "".join(k.str_value("nameSuffix") for k in chain)
    return prefix, suffix


def namespace_of(chain: list[Kustomization]) -> str:
    for k in reversed(chain):  # the outermost kustomization that sets one decides
        if k.str_value("namespace"):
            return k.str_value("namespace")
    return ""


def names_of(base_name: str, chain: list[Kustomization]) -> set[str]:
    """Every name an object has on its way through `chain`: kustomize matches `replicas:`
    entries and patch targets against any of them."""
    names = set()
    for i in range(len(chain) + 1):
        prefix, suffix = chain_affixes(chain[:i])
        names.add(prefix + base_name + suffix)
    return names


def render_identity(identity: Identity, chain: list[Kustomization]) -> Identity:
    prefix, suffix = chain_affixes(chain)
    namespace = identity.namespace
    if namespaced(identity) and namespace_of(chain):
        namespace = namespace_of(chain)
    return Identity(identity.group, identity.kind, namespace, prefix + identity.name + suffix)


def generated_by(identity: Identity, chain: list[Kustomization]) -> str | None:
    """The generator (`configMapGenerator <name>`) that renders an object of this identity in
    a kustomization of `chain`, if any (names with or without the content hash suffix)."""
    for i, k in enumerate(chain):
        for key, kind in _GENERATORS.items():
            if identity.kind != kind or identity.group:
                continue
            outer = chain[i:]
            prefix, suffix = chain_affixes(outer)
            for gen in k.entries(key):
                name = gen.get("name") if isinstance(gen, Mapping) else None
                if not isinstance(name, str):
                    continue
                rendered = prefix + name + suffix
                if identity.name == rendered or (
                    identity.name.startswith(rendered)
                    and _HASH_SUFFIX.fullmatch(identity.name[len(rendered) :])
                ):
                    return f"{key} {name}"
    return None


def _patch_hits(
    patches: list[tuple[str | None, str | None, str]], identity: Identity, names: set[str]
) -> str | None:
    for kind, name, what in patches:
        if kind is not None and kind != identity.kind:
            continue
        if name is not None and name not in names:
            continue
        return what
    return None


def patched_by(
    identity: Identity, chain: list[Kustomization], tree: Tree, base_name: str
) -> str | None:
    """The patches in `chain` that hit this object (kustomize fails on a patch whose
    target is gone, so such an object's file must stay)."""
    names = names_of(base_name, chain) | {identity.name}
    for k in chain:
        hit = _patch_hits(tree.patches.get(k.dir, []), identity, names)
        if hit is not None:
            return hit
    return None


def unsupported(
    identity: Identity, chain: list[Kustomization], tree: Tree, base_name: str
) -> str | None:
    """What in `chain` the operator cannot write a change of this object through (named),
    or None."""
    for k in chain:
        problems = tree.problems.get(k.dir) or []
        if problems:
            return f"{problems[0]} in {k.path}"
    generator = generated_by(identity, chain)
    if generator is not None:
        return generator
    names = names_of(base_name, chain) | {identity.name}
    for k in chain:
        hit = _patch_hits(tree.patches.get(k.dir, []), identity, names)
        if hit is not None:
            return hit
    return None


# -- images ----------------------------------------------------------------------------------
