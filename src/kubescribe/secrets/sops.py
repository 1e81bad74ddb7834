"""SOPS-encrypted YAML documents with age recipients, compatible with the ``sops`` tool.

Pure functions over bytes and trees. A file is the document with encrypted leaves plus a
``sops`` metadata block; values are AES-256-GCM encrypted under a per-file data key that is
wrapped for every age recipient, and a MAC over all leaf values guards the whole tree.

`encrypt_document` keeps output stable for a Git mirror: given the data keys the caller owns,
a previous file under one of them returns its bytes when the document is unchanged, and
lends the ciphertext of every unchanged value otherwise. A previous file under any other key
(one a repo writer chose) lends nothing. Exceptions never carry plaintext or key material.

The MAC does not cover ``sops.age``: a repo writer can swap one recipient's stanza for
garbage and the file still opens for every other recipient. So stanzas are never taken from
a previous file. Each is made from the data key (`age.wrap_seeded`), the same bytes every
time, and a previous file is returned unchanged only when every stanza is exactly the one the
data key makes: a swapped stanza is replaced on the next write.

As in sops, the MAC covers the values (in order), not the map keys: renaming the key of an
unencrypted value, or adding or removing a null, goes unnoticed by sops and by this module.
Keys on the path of an encrypted value are bound to it as AES-GCM additional data.
"""

import functools
import hashlib
import hmac
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeAlias

from cryptography.exceptions import InvalidTag
from pyrage import x25519

from kubescribe.mirror.yamlfmt import dump_yaml
from kubescribe.secrets import _cipher, _goyaml, _shamir, age
from kubescribe.secrets._cipher import Typed, ValueTypeError
from kubescribe.secrets._re2 import compile_re2
from kubescribe.secrets.datakey import DATA_KEY_SIZE

SOPS_VERSION = "3.11.0"
# Files read back from Git above this size are not opened (a Secret holds at most 1 MiB).
MAX_FILE_SIZE = 8 << 20
K8S_SECRET_REGEX = "^(data|stringData)$"

_RULE_FIELDS = ("encrypted_regex", "unencrypted_regex", "encrypted_suffix", "unencrypted_suffix")
_COMMENT_RULES = ("encrypted_comment_regex", "unencrypted_comment_regex")
_OTHER_KEY_TYPES = ("kms", "gcp_kms", "azure_kv", "hc_vault", "pgp", "hckms")
# sha256("sops"): sops seeds the MAC with it when mac_only_encrypted is set.
_MAC_ONLY_ENCRYPTED_SEED = bytes.fromhex(
    "8a3fd2ad54ce66527b1034f3d147be0b0b975b3bf44f72c6fdadec8176f27d69"
)

_Stash: TypeAlias = dict[tuple[str, Typed], list[str]]
_Path: TypeAlias = tuple[str, ...]


class SopsError(Exception):
    """Base class for sops file errors."""


class MacMismatchError(SopsError):
    """The file was modified: the MAC or a value's authentication tag does not verify."""


class NoMatchingKeyError(SopsError):
    """None of the given identities opens the file's data key."""


class ForeignKeyError(SopsError):
    """The file opens, but under another data key than the caller's own."""


class MalformedSopsError(SopsError):
    """The input is not a sops YAML file this module can read."""


@dataclass(frozen=True)
class CryptRule:
    """Which leaves sops encrypts: exactly one of the four settings (sops semantics).

    A value is selected when any map key on its path matches (regexes: Go RE2, unanchored
    search; suffixes: ``str.endswith``). ``CryptRule()`` is the Kubernetes Secret default,
    ``encrypted_regex="^(data|stringData)$"``.
    """

    encrypted_regex: str | None = None
    unencrypted_regex: str | None = None
    encrypted_suffix: str | None = None
    unencrypted_suffix: str | None = None

    def __post_init__(self) -> None:
        chosen = [name for name in _RULE_FIELDS if getattr(self, name) is not None]
        if not chosen:
            object.__setattr__(self, "encrypted_regex", K8S_SECRET_REGEX)
            return
        if len(chosen) > 1:
            raise ValueError(f"exactly one crypt rule may be set, got {', '.join(chosen)}")
        name, value = self.setting
        if not value:
            raise ValueError(f"{name} must not be empty")
        if name.endswith("_regex"):
            compile_re2(value)

    @property
    def setting(self) -> tuple[str, str]:
        """The ``(metadata key, value)`` pair, as written in the ``sops`` block."""
        for name in _RULE_FIELDS:
            value = getattr(self, name)
            if value is not None:
                return name, value
        raise AssertionError("unreachable: __post_init__ sets a rule")

    def encrypts(self, path: Sequence[str]) -> bool:
        """Whether the leaf under map keys ``path`` is encrypted."""
        name, value = self.setting
        if name.endswith("_regex"):
            pattern = compile_re2(value)
            hit = any(pattern.search(key) for key in path)
        else:
            hit = any(key.endswith(value) for key in path)
        return hit == name.startswith("encrypted")


SOPS_DEFAULT_RULE = CryptRule(unencrypted_suffix="_unencrypted")


# --- trees -------------------------------------------------------------------------------


def _dotted(path: _Path) -> str:
    return ".".join(path) or "<root>"


def _ad(path: _Path) -> str:
    return ":".join(path) + ":"


def _plain_tree(value: Any, path: _Path = ()) -> Any:
    """Copy of a JSON-like tree with exact builtin types; rejects what sops cannot hold."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise SopsError(f"non-string map key under {_dotted(path)}")
            out[str(key)] = _plain_tree(item, (*path, key))
        return out
    if isinstance(value, list | tuple):
        return [_plain_tree(item, path) for item in value]
    if value is None:
        return None
    try:
        _cipher.typed_leaf(value)
    except ValueTypeError as err:
        raise SopsError(f"{err} at {_dotted(path)}") from None
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    raise AssertionError("unreachable: typed_leaf accepted the value")


def _typed_view(value: Any) -> object:
    """Hashable, order-sensitive view of a tree with sops-typed leaves (1 != 1.0 != True)."""
    if isinstance(value, dict):
        return ("map", tuple((key, _typed_view(item)) for key, item in value.items()))
    if isinstance(value, list):
        return ("seq", tuple(_typed_view(item) for item in value))
    return None if value is None else _cipher.typed_leaf(value)


def _first_difference(a: Any, b: Any, path: _Path = ()) -> _Path:
    if isinstance(a, dict) and isinstance(b, dict) and list(a) == list(b):
        for key in a:
            if _typed_view(a[key]) != _typed_view(b[key]):
                return _first_difference(a[key], b[key], (*path, str(key)))
    return path


# --- encryption --------------------------------------------------------------------------


@dataclass
class _Encryptor:
    key: bytes
    rule: CryptRule
    stash: _Stash
    mac: "hashlib._Hash" = field(default_factory=hashlib.sha512)

    def tree(self, value: Any, path: _Path) -> Any:
        if isinstance(value, dict):
            return {key: self.tree(item, (*path, key)) for key, item in value.items()}
        if isinstance(value, list):
            return [self.tree(item, path) for item in value]
        if value is None:
            return None
        typed = _cipher.typed_leaf(value)
        self.mac.update(typed.plain)
        if typed == Typed("str", b"") or not self.rule.encrypts(path):
            return value
        ad = _ad(path)
        reusable = self.stash.get((ad, typed))
        return reusable.pop(0) if reusable else _cipher.encrypt(self.key, ad, typed)

    def mac_value(self, lastmodified: str) -> str:
        digest = self.mac.hexdigest().upper().encode()
        return _cipher.encrypt(self.key, lastmodified, Typed("str", digest))


# --- decryption --------------------------------------------------------------------------


@dataclass
class _Decryptor:
    key: bytes
    rule: CryptRule
    mac_only_encrypted: bool
    stash: _Stash = field(default_factory=dict)
    mac: "hashlib._Hash" = field(default_factory=hashlib.sha512)

    def __post_init__(self) -> None:
        if self.mac_only_encrypted:
            self.mac.update(_MAC_ONLY_ENCRYPTED_SEED)

    def tree(self, value: Any, path: _Path) -> Any:
        if isinstance(value, dict):
            if not all(isinstance(key, str) for key in value):
                raise MalformedSopsError(f"non-string map key under {_dotted(path)}")
            return {key: self.tree(item, (*path, key)) for key, item in value.items()}
        if isinstance(value, list):
            return [self.tree(item, path) for item in value]
        if value is None:
            return None
        encrypted = self.rule.encrypts(path)
        if encrypted:
            plain, typed = self._open_leaf(value, path)
        else:
            plain, typed = value, self._typed(value, path)
        if encrypted or not self.mac_only_encrypted:
            self.mac.update(typed.plain)
        return plain

    @staticmethod
    def _typed(value: object, path: _Path) -> Typed:
        try:
            return _cipher.typed_leaf(value)
        except ValueTypeError as err:
            raise MalformedSopsError(f"{err} at {_dotted(path)}") from None

    def _open_leaf(self, value: object, path: _Path) -> tuple[object, Typed]:
        if value == "":
            return "", Typed("str", b"")
        enc = _cipher.parse(value) if isinstance(value, str) else None
        if enc is None:
            raise MalformedSopsError(f"value at {_dotted(path)} should be encrypted but is not")
        ad = _ad(path)
        try:
            raw = _cipher.decrypt(self.key, enc, ad)
        except InvalidTag:
            raise MacMismatchError(f"value at {_dotted(path)} fails authentication") from None
        try:
            plain, typed = _cipher.to_python(enc.type, raw)
        except ValueTypeError as err:
            raise MalformedSopsError(f"{err} at {_dotted(path)}") from None
        assert isinstance(value, str)
        if value.endswith("]"):  # sops ignores text after "]"; do not carry it forward
            self.stash.setdefault((ad, Typed(enc.type, raw)), []).append(value)
        return plain, typed


# --- metadata ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Metadata:
    groups: list[list[tuple[str, str]]]  # per key group: (recipient, armored enc)
    flat: bool  # a plain "age" list, not "key_groups"
    threshold: int
    other_keys: bool
    lastmodified: str  # canonical RFC 3339, the MAC's additional data
    mac: str
    rule: CryptRule
    mac_only_encrypted: bool


def _age_stanzas(raw: object) -> list[tuple[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise MalformedSopsError("sops.age must be a list")
    stanzas = []
    for entry in raw:
        if not isinstance(entry, dict):
            raise MalformedSopsError("sops.age entries must be maps")
        recipient, enc = entry.get("recipient"), entry.get("enc")
        if not isinstance(recipient, str) or not isinstance(enc, str):
            raise MalformedSopsError("sops.age entries need recipient and enc strings")
        stanzas.append((recipient, enc))
    return stanzas


def _metadata_rule(meta: dict[str, Any]) -> CryptRule:
    if any(meta.get(name) for name in _COMMENT_RULES):
        raise MalformedSopsError("comment-based crypt rules are not supported")
    settings = {name: meta[name] for name in _RULE_FIELDS if meta.get(name)}
    if not settings:
        return SOPS_DEFAULT_RULE  # what sops assumes for files without a rule
    if not all(isinstance(v, str) for v in settings.values()):
        raise MalformedSopsError("crypt rule values must be strings")
    try:
        return CryptRule(**settings)
    except ValueError as err:
        raise MalformedSopsError(f"unsupported crypt rule: {err}") from None


def _key_groups(raw: dict[str, Any]) -> tuple[list[list[tuple[str, str]]], bool]:
    """Age stanzas per key group, and whether any non-age master key is present."""
    key_groups = raw.get("key_groups")
    if not key_groups:
        return [_age_stanzas(raw.get("age"))], any(raw.get(kind) for kind in _OTHER_KEY_TYPES)
    if not isinstance(key_groups, list) or not all(isinstance(g, dict) for g in key_groups):
        raise MalformedSopsError("sops.key_groups must be a list of maps")
    other = any(group.get(kind) for group in key_groups for kind in _OTHER_KEY_TYPES)
    return [_age_stanzas(group.get("age")) for group in key_groups], other


def _lastmodified_ad(raw: dict[str, Any]) -> str:
    """sops re-parses lastmodified and formats it as RFC 3339 for the MAC's AD."""
    text = raw.get("lastmodified")
    stamp = _goyaml.canonical_rfc3339(text, nanos=False) if isinstance(text, str) else None
    if stamp is None:
        raise MalformedSopsError("sops.lastmodified is missing or not RFC 3339")
    return stamp


def _parse_metadata(raw: object) -> _Metadata:
    if not isinstance(raw, dict):
        raise MalformedSopsError("the sops metadata block is missing")
    groups, other_keys = _key_groups(raw)
    mac, threshold = raw.get("mac"), raw.get("shamir_threshold")
    if not isinstance(mac, str):
        raise MalformedSopsError("sops.mac is missing")
    if threshold is not None and (not isinstance(threshold, int) or isinstance(threshold, bool)):
        raise MalformedSopsError("sops.shamir_threshold must be an integer")
    return _Metadata(
        groups=groups,
        flat=not raw.get("key_groups"),
        threshold=threshold or len(groups),
        other_keys=other_keys,
        lastmodified=_lastmodified_ad(raw),
        mac=mac,
        rule=_metadata_rule(raw),
        mac_only_encrypted=raw.get("mac_only_encrypted") is True,
    )


def _open_group(group: list[tuple[str, str]], keys: Sequence[x25519.Identity]) -> bytes | None:
    for _recipient, enc in group:
        opened = age.unwrap(enc, keys)
        if opened is not None:
            return opened
    return None


def _data_key(meta: _Metadata, keys: Sequence[x25519.Identity]) -> bytes:
    parts = [part for group in meta.groups if (part := _open_group(group, keys)) is not None]
    if len(meta.groups) == 1:
        if not parts:
            raise NoMatchingKeyError("none of the identities opens an age stanza of the file")
        data_key = parts[0]
    else:
        needed = max(2, meta.threshold)
        if len(parts) < needed:
            raise NoMatchingKeyError(f"opened {len(parts)} key groups, {needed} are needed")
        try:
            data_key = _shamir.combine(parts)
        except ValueError:
            raise MalformedSopsError("the key group shares do not combine") from None
    if len(data_key) != DATA_KEY_SIZE:
        raise MalformedSopsError("the data key has the wrong size")
    return data_key


def _verify_mac(key: bytes, meta: _Metadata, computed: str) -> None:
    enc = _cipher.parse(meta.mac)
    if enc is None:
        raise MalformedSopsError("sops.mac is not an encrypted value")
    try:
        stored = _cipher.decrypt(key, enc, meta.lastmodified)
    except InvalidTag:
        raise MacMismatchError("the MAC fails authentication") from None
    if not hmac.compare_digest(stored, computed.encode()):
        raise MacMismatchError("MAC mismatch: the file was modified")


@dataclass(frozen=True)
class _Opened:
    tree: dict[str, Any]
    key: bytes
    meta: _Metadata
    stash: _Stash


def _load_document(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_FILE_SIZE:
        raise MalformedSopsError(f"the file is larger than {MAX_FILE_SIZE >> 20} MiB")
    try:
        doc = _goyaml.load(data)
    except _goyaml.GoYamlError as err:
        raise MalformedSopsError(str(err)) from None
    if not isinstance(doc, dict) or "sops" not in doc:
        raise MalformedSopsError("not a sops YAML file (no top-level sops block)")
    return doc


def _open(data: bytes, keys: Sequence[x25519.Identity]) -> _Opened:
    doc = _load_document(data)
    meta = _parse_metadata(doc.pop("sops"))
    key = _data_key(meta, keys)
    walker = _Decryptor(key, meta.rule, meta.mac_only_encrypted)
    tree = walker.tree(doc, ())
    _verify_mac(key, meta, walker.mac.hexdigest().upper())
    return _Opened(tree, key, meta, walker.stash)


# --- public API --------------------------------------------------------------------------


def decrypt_document(
    data: bytes, identities: Sequence[str], *, own_keys: Sequence[bytes] | None = None
) -> dict[str, Any]:
    """Decrypt a sops YAML file and verify its MAC; returns the Go-typed plaintext tree.

    With ``own_keys``, the file must be encrypted under one of them (keys the caller made),
    else `ForeignKeyError`. Raises `NoMatchingKeyError`, `MacMismatchError` or
    `MalformedSopsError` (all `SopsError`); ValueError for an invalid identity string.
    """
    opened = _open(data, age.load_identities(identities))
    if own_keys is not None and not _is_own(opened.key, own_keys):
        raise ForeignKeyError("the file's data key is not one of the caller's")
    return opened.tree


def _recipients(recipients: Sequence[str]) -> list[str]:
    if isinstance(recipients, str):
        raise TypeError("recipients must be a sequence of strings, not a string")
    unique = list(dict.fromkeys(age.check_recipient(r.strip()) for r in recipients))
    if not unique:
        raise ValueError("at least one age recipient is required")
    return unique


def _lastmodified(now: datetime) -> str:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    t = now.astimezone(UTC)
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"


def _is_own(key: bytes, own_keys: Sequence[bytes]) -> bool:
    return any(hmac.compare_digest(key, own) for own in own_keys)


def _open_previous(
    previous: bytes | None, identities: Sequence[str], own_keys: Sequence[bytes]
) -> _Opened | None:
    """The previous file, only if it opens to one of ``own_keys`` (the caller's keys)."""
    keys = age.load_identities(identities)
    if previous is None or not own_keys or not keys:
        return None
    try:
        opened = _open(previous, keys)
    except (SopsError, ValueError):  # untrusted: whatever is wrong with it, it lends nothing
        return None
    return opened if _is_own(opened.key, own_keys) else None


def _unchanged(
    prev: _Opened, plain: dict[str, Any], recipients: list[str], rule: CryptRule
) -> bool:
    meta = prev.meta
    if not meta.flat or meta.other_keys or meta.mac_only_encrypted or meta.rule != rule:
        return False
    if _typed_view(prev.tree) != _typed_view(plain):
        return False
    # A stanza the data key does not make: swapped by a repo writer, or of an earlier version.
    return sorted(meta.groups[0]) == sorted((r, _stanza(prev.key, r)) for r in recipients)


@functools.lru_cache(maxsize=4096)
def _stanza(key: bytes, recipient: str) -> str:
    """The recipient's stanza of the data key, the same bytes every time (see the module).
    Remembered: it costs two X25519 operations, and a snapshot renders every document."""
    return age.wrap_seeded(key, recipient)


def _age_entries(key: bytes, recipients: list[str]) -> list[dict[str, str]]:
    return [{"recipient": r, "enc": _stanza(key, r)} for r in recipients]


def _check_readback(text: str, expected: dict[str, Any]) -> None:
    """Fail rather than write a file that sops would read with other types (a bad MAC)."""
    try:
        readback = _goyaml.load(text)
    except _goyaml.GoYamlError as err:
        raise SopsError(f"the document cannot be read back as sops would: {err}") from None
    if _typed_view(readback) != _typed_view(expected):
        where = _dotted(_first_difference(readback, expected))
        raise SopsError(f"the YAML emitter wrote {where} in a form sops reads as another type")


def encrypt_document(
    doc: Mapping[str, Any],
    recipients: Sequence[str],
    *,
    rule: CryptRule,
    now: datetime,
    own_keys: Sequence[bytes] = (),
    previous: bytes | None = None,
    identities: Sequence[str] = (),
) -> bytes:
    """Encrypt ``doc`` to the age ``recipients``; returns the sops YAML file.

    ``own_keys`` are data keys the caller made itself: a new file is encrypted under the
    first (under fresh random bytes without any). ``previous`` (the current file) is used
    only if one of ``identities`` opens it to one of ``own_keys``: then an identical
    plaintext, rule and recipient set, with every stanza the one its data key makes, returns
    ``previous`` unchanged, and otherwise its key is kept and unchanged values keep their
    exact ciphertext (stanzas are always made afresh from the key). Any other ``previous``
    (unreadable, or under a key the caller did not make) is ignored, whatever plaintext it
    holds.
    """
    wanted = _recipients(recipients)
    lastmodified = _lastmodified(now)
    if not isinstance(doc, Mapping):
        raise SopsError("the document must be a map")
    plain = _plain_tree(doc)
    if "sops" in plain:
        raise SopsError("the document must not have a top-level sops key")
    if any(len(own) != DATA_KEY_SIZE for own in own_keys):
        raise ValueError(f"data keys must be {DATA_KEY_SIZE} bytes")
    prev = _open_previous(previous, identities, own_keys)
    if previous is not None and prev is not None and _unchanged(prev, plain, wanted, rule):
        return previous
    fresh = own_keys[0] if own_keys else os.urandom(DATA_KEY_SIZE)
    key = prev.key if prev is not None else fresh
    walker = _Encryptor(key, rule, prev.stash if prev is not None else {})
    tree = walker.tree(plain, ())
    name, value = rule.setting
    meta = {
        "age": _age_entries(key, wanted),
        "lastmodified": lastmodified,
        "mac": walker.mac_value(lastmodified),
        name: value,
        "version": SOPS_VERSION,
    }
    document = {**tree, "sops": meta}
    text = dump_yaml(document)
    _check_readback(text, document)
    return text.encode("utf-8")


def sops_config_yaml(path_regex: str, recipients: Sequence[str], rule: CryptRule) -> str:
    """A ``.sops.yaml`` with one creation rule, so ``sops`` run by hand matches the operator."""
    compile_re2(path_regex)
    name, value = rule.setting
    creation_rule = {
        "path_regex": path_regex,
        name: value,
        "age": ",".join(_recipients(recipients)),
    }
    return dump_yaml({"creation_rules": [creation_rule]})


@dataclass(frozen=True)
class SopsInfo:
    """What a sops file's metadata says, without decrypting it."""

    recipients: tuple[str, ...]  # age recipients, in file order (all key groups)
    rule: CryptRule
    simple: bool  # one plain age list: no key groups, other key types or mac_only_encrypted


def inspect_document(data: bytes) -> SopsInfo:
    """Read a sops YAML file's metadata; raises `MalformedSopsError`."""
    meta = _parse_metadata(_load_document(data)["sops"])
    recipients = tuple(recipient for group in meta.groups for recipient, _ in group)
    simple = meta.flat and not meta.other_keys and not meta.mac_only_encrypted
    return SopsInfo(recipients, meta.rule, simple)
