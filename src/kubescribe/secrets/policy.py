"""Which documents are sensitive and which of their values sops encrypts (pure).

Core Secrets are always sensitive: their ``data`` and ``stringData`` are encrypted, whatever
else is configured (there is no plaintext opt-out). Further types come from a GitTarget's
``spec.encryption.sensitiveTypes``, each with either

* ``paths``: dot paths such as ``spec.credentials``. sops selects values by map *key*, not by
  path: a value is encrypted when any key on its path matches ``encrypted_regex``. So the rule
  is built from the last component of each path (``^(credentials)$``), and every value under a
  key of that name is encrypted, at any depth. That can encrypt more than asked, never less.
  A last component that names a key of the object's identity (``apiVersion``, ``kind``,
  ``metadata``, ``name``, ``namespace``) is refused: it would encrypt ``metadata.name`` and
  the file could no longer be matched to its object.
* ``wholeDocument``: every top-level key except ``apiVersion``, ``kind`` and ``metadata`` is
  encrypted (the rule names the document's own top-level keys, so values nested under keys
  called ``metadata`` or ``kind`` inside ``spec`` are encrypted too).

In every sensitive document the values under keys named ``annotations`` and ``labels`` are
encrypted as well (so ``metadata`` keeps its keys, ``name`` and ``namespace`` readable, but no
copy of a value). There is no allow-list: sops selects by key name on any path component, and
a value one key matches is encrypted, so an exception for one annotation cannot be expressed.

`sops_config` renders the ``.sops.yaml`` written into a target folder, so that ``sops`` run
by hand there picks the same rules and recipients as the operator.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubescribe.api.gittarget import SensitiveType
from kubescribe.mirror.identity import CORE_GROUP
from kubescribe.mirror.layout import ENCRYPTED_SUFFIX
from kubescribe.mirror.yamlfmt import dump_yaml

if TYPE_CHECKING:
    # SOPS itself (cryptography, age) is imported when a document is encrypted.
    from kubescribe.secrets.sops import CryptRule

SECRETS = ("", "secrets")
SECRET_KEYS = ("data", "stringData")
# Label and annotation values of every sensitive document are encrypted as well (their keys
# stay readable): tools copy whole manifests into annotations (`kapp.k14s.io/original`,
# `objectset.rio.cattle.io/applied`, ...) and checksums of values into labels.
METADATA_KEYS = ("annotations", "labels")
IDENTITY_KEYS = frozenset({"apiVersion", "kind", "metadata", "name", "namespace"})
HEADER_KEYS = ("apiVersion", "kind", "metadata")
SOPS_CONFIG_MARKER = "# Managed by kubescribe"
_SOPS_CONFIG_HEADER = (
    f"{SOPS_CONFIG_MARKER}: the rules and age recipients the operator encrypts with, so that\n"
    "# sops run in this folder does the same. kubescribe rewrites this file when the\n"
    "# recipients change; remove these lines to keep a file of your own.\n"
)
_METACHARACTERS = frozenset("\\.+*?()|[]{}^$")


class PolicyError(ValueError):
    """A sensitive type cannot be encrypted safely; the message names fields, never values."""


def escape(text: str) -> str:
    """`text` as a literal in RE2 syntax."""
    return "".join(f"\\{c}" if c in _METACHARACTERS else c for c in text)


def key_regex(keys: Iterable[str]) -> str:
    """``^(a|b)$`` matching exactly these map keys, in RE2 syntax (what sops runs)."""
    return "^(" + "|".join(escape(key) for key in keys) + ")$"


@dataclass(frozen=True)
class TypeRule:
    """How documents of one sensitive type are encrypted."""

    group: str
    resource: str
    keys: tuple[str, ...] = ()
    whole_document: bool = False

    def rule_for(self, document: Mapping[str, object]) -> CryptRule:
        """The crypt rule for one document (raises `PolicyError`)."""
        from kubescribe.secrets.sops import CryptRule  # noqa: PLC0415

        keys = list(self.keys)
        if self.whole_document:
            top = [str(k) for k in document if k not in HEADER_KEYS]
            clash = sorted(IDENTITY_KEYS.intersection(top))
            if clash:
                raise PolicyError(
                    f"top-level field {clash[0]!r} has the name of an identity field;"
                    " wholeDocument cannot encrypt it without hiding metadata"
                )
            keys += [k for k in top if k not in keys]
        return CryptRule(encrypted_regex=key_regex(_with_metadata(keys)))

    def config_rule(self) -> CryptRule:
        """The rule in ``.sops.yaml`` for files a person creates (not per document)."""
        from kubescribe.secrets.sops import CryptRule  # noqa: PLC0415

        if self.whole_document:
            return CryptRule(unencrypted_regex=key_regex(HEADER_KEYS))
        return CryptRule(encrypted_regex=key_regex(_with_metadata(self.keys)))


def _with_metadata(keys: Sequence[str]) -> list[str]:
    return [*keys, *(k for k in METADATA_KEYS if k not in keys)]


SECRET_RULE = TypeRule(*SECRETS, keys=SECRET_KEYS)
DEFAULT_RULES: Mapping[tuple[str, str], TypeRule] = {SECRETS: SECRET_RULE}


def _last_components(item: SensitiveType, where: str) -> list[str]:
    keys: list[str] = []
    for j, path in enumerate(item.paths):
        parts = path.split(".")
        if not path or any(not part for part in parts):
            raise PolicyError(f"{where}.paths[{j}]: {path!r} is not a dot path")
        last = parts[-1]
        if last in IDENTITY_KEYS:
            raise PolicyError(
                f"{where}.paths[{j}]: {path!r} ends in {last!r}, which sops would also"
                " encrypt in the object's metadata (sops matches keys, not paths)"
            )
        if last not in keys:
            keys.append(last)
    return keys


def compile_rules(types: Sequence[SensitiveType]) -> dict[tuple[str, str], TypeRule]:
    """The rules of every sensitive type: core Secrets plus `types` (raises `PolicyError`).

    An entry for core ``secrets`` widens what is encrypted in Secrets, never narrows it.
    """
    rules: dict[tuple[str, str], TypeRule] = dict(DEFAULT_RULES)
    for i, item in enumerate(types):
        where = f"spec.encryption.sensitiveTypes[{i}]"
        if not item.whole_document and not item.paths:
            raise PolicyError(f"{where}: set paths or wholeDocument")
        keys = _last_components(item, where)
        gr = (item.group, item.resource)
        if gr == SECRETS:
            keys = [*SECRET_KEYS, *(k for k in keys if k not in SECRET_KEYS)]
        rules[gr] = TypeRule(item.group, item.resource, tuple(keys), item.whole_document)
    return rules


def path_regex(template: str, group: str, resource: str) -> str:
    """RE2 ``path_regex`` (relative to the folder of ``.sops.yaml``, as sops matches it) for
    the encrypted files a layout template gives documents of one type."""
    stem = template.removesuffix(ENCRYPTED_SUFFIX).removesuffix(".yaml")
    fixed = {"group": group or CORE_GROUP, "resource": resource}
    out = ["^"]
    for literal, name, _spec, _conversion in string.Formatter().parse(stem):
        out.append(escape(literal))
        if name is not None:
            out.append(escape(fixed[name]) if name in fixed else "[^/]+")
    out.append(escape(ENCRYPTED_SUFFIX) + "$")
    return "".join(out)


def sops_config(
    rules: Mapping[tuple[str, str], TypeRule],
    template_for: Callable[[str, str], str],
    recipients: Sequence[str],
) -> str:
    """``.sops.yaml``: one creation rule per sensitive type (at its layout path), then one for
    any other ``*.sops.yaml`` (documents kept where a person moved them)."""
    age = ",".join(recipients)
    if not age:
        raise ValueError("at least one age recipient is required")
    creation_rules = []
    for (group, resource), rule in sorted(rules.items()):
        name, value = rule.config_rule().setting
        creation_rules.append(
            {
                "path_regex": path_regex(template_for(group, resource), group, resource),
                name: value,
                "age": age,
            }
        )
    name, value = SECRET_RULE.config_rule().setting
    creation_rules.append({"path_regex": escape(ENCRYPTED_SUFFIX) + "$", name: value, "age": age})
    return _SOPS_CONFIG_HEADER + dump_yaml({"creation_rules": creation_rules})


def managed_sops_config(data: bytes) -> bool:
    """Whether a ``.sops.yaml`` is the operator's (and may be rewritten)."""
    return data.startswith(SOPS_CONFIG_MARKER.encode())
