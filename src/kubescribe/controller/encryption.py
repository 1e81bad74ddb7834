"""Encryption of sensitive documents: the SOPS renderer of a GitTarget, and how a target's
`spec.encryption` becomes one (age key Secret, recipients, status).

Ground rule 3: a sensitive document (core Secrets, and the target's `sensitiveTypes`) is only
ever written SOPS-encrypted. Without usable recipients the renderer refuses it; the branch
worker reports the refusal, counts it, and keeps writing everything else.

The age key Secret is read by a direct GET whenever a reconcile needs it (never watched, never
cached beyond the renderer built from it), and no key material, plaintext value or decoded
Secret content is logged, raised or written to status.

Data keys never come from Git (a repo writer could choose them). With identities
(`ageKeySecretRef`) each document's key is derived from an identity, the document's identity
and the recipient set (`derive_data_key`): a file in Git under such a key keeps its exact bytes
when the document is unchanged, also after a restart, and lends the ciphertext of unchanged
values otherwise; a file under any other key is encrypted afresh, and never re-encrypted
(`rekey`) from its own content. A target with inline recipients only
gives the operator no identity: every file gets a fresh random key, and the renderer remembers,
for this process, which plaintext each file it wrote holds (an HMAC under a per-process key,
never the plaintext), so a re-list makes no commit; after a restart such documents are
encrypted again. `ageKeySecretRef` avoids that.

SOPS and age (cryptography, pyrage) are imported when a document is encrypted or a key is
read, so an operator whose targets encrypt nothing never loads them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from kubescribe.api import conditions as c
from kubescribe.api.gittarget import EncryptionSpec, GitTargetSpec
from kubescribe.controller.keysecrets import SecretUnavailable, read_object, write_generated
from kubescribe.controller.ownership import created_by_kubescribe, not_ours_message
from kubescribe.controller.plan import Plan, TargetPlan
from kubescribe.controller.status import Cond
from kubescribe.git.targets import RefusedContent
from kubescribe.kube.client import KubeClient
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.layout import Layout
from kubescribe.mirror.yamlfmt import dump_yaml, order_document
from kubescribe.secrets.policy import (
    DEFAULT_RULES,
    PolicyError,
    TypeRule,
    compile_rules,
    managed_sops_config,
    sops_config,
)

log = structlog.get_logger(__name__)

AGE_KEY_SUFFIX = ".agekey"
GENERATED_KEY = "identity.agekey"
BACKUP_NOTE = "Back up this age key: without it the encrypted files in Git cannot be decrypted"

_MEMO_KEY = os.urandom(32)
_MEMO_LIMIT = 100_000

Rules = Mapping[tuple[str, str], TypeRule]


def _now() -> datetime:
    return datetime.now(UTC)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class SopsRenderer:
    """The worker's `Renderer` for one target: plain YAML for ordinary types, SOPS for
    sensitive ones, and a refusal for sensitive ones when there are no recipients.

    It also implements the worker's `Encrypting` extension: the `.sops.yaml` of the folder,
    and re-encryption of files whose recipients differ (only with identities that open them).
    """

    def __init__(
        self,
        *,
        recipients: Sequence[str] = (),
        identities: Sequence[str] = (),
        rules: Rules = DEFAULT_RULES,
        layout: Layout | None = None,
        refusal: tuple[str, str] = (c.ENCRYPTION_MISSING, "no encryption is configured"),
        memo: dict[bytes, bytes] | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.recipients = tuple(dict.fromkeys(recipients))
        self._identities = tuple(sorted(identities))  # the first one's keys encrypt
        self.rules = rules
        self.layout = layout or Layout()
        self.refusal = refusal
        self._memo = memo if memo is not None else {}
        self._clock = clock

    def __repr__(self) -> str:  # never show identities
        return f"SopsRenderer(recipients={len(self.recipients)}, types={sorted(self.rules)})"

    @property
    def can_decrypt(self) -> bool:
        return bool(self._identities)

    @property
    def identity_recipients(self) -> frozenset[str]:
        """The public keys of the identities (the operator's data keys derive from them)."""
        from kubescribe.secrets import age  # noqa: PLC0415

        return frozenset(age.recipient_of(i) for i in self._identities)

    def _rule(self, rtype: ResourceType) -> TypeRule | None:
        return self.rules.get((rtype.group, rtype.resource))

    def encrypted(self, rtype: ResourceType) -> bool:
        return self._rule(rtype) is not None

    def render(
        self,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
        previous: bytes | None,
    ) -> bytes:
        doc = order_document(document)
        type_rule = self._rule(rtype)
        if type_rule is None:
            return dump_yaml(doc).encode()
        what = f"{identity.kind} {identity.ref}"
        if not self.recipients:
            reason, message = self.refusal
            raise RefusedContent(reason, f"{what} not written: {message}")
        try:
            rule = type_rule.rule_for(doc)
        except PolicyError as err:
            raise RefusedContent(c.ENCRYPTION_FAILED, f"{what} not written: {err}") from None
        from kubescribe.secrets.sops import SopsError, encrypt_document  # noqa: PLC0415

        digest = b""
        if not self._identities:
            digest = self._digest(doc, rule.setting)
            if previous is not None and self._memo.get(_sha(previous)) == digest:
                return previous
        try:
            data = encrypt_document(
                doc,
                self.recipients,
                rule=rule,
                now=self._clock(),
                own_keys=self._own_keys(identity, self.recipients),
                previous=previous,
                identities=self._identities,
            )
        except SopsError as err:  # messages name paths, never values
            raise RefusedContent(c.ENCRYPTION_FAILED, f"{what} not written: {err}") from None
        if digest:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[_sha(data)] = digest
        return data

    def _own_keys(self, identity: Identity, recipients: Sequence[str]) -> list[bytes]:
        """The operator's data keys for a document, one per identity (the first encrypts new
        files); none without identities (fresh random keys)."""
        from kubescribe.secrets.datakey import derive_data_key  # noqa: PLC0415

        scope = json.dumps([identity.group, identity.kind, identity.namespace, identity.name])
        return [derive_data_key(i, scope, recipients) for i in self._identities]

    def _digest(self, doc: Mapping[str, Any], setting: tuple[str, str]) -> bytes:
        """HMAC of what decides the file's plaintext content (order and types included)."""
        canonical = json.dumps(
            [doc, setting, sorted(self.recipients)], separators=(",", ":"), default=repr
        )
        return hmac.new(_MEMO_KEY, canonical.encode(), hashlib.sha256).digest()

    # -- Encrypting (worker upkeep) -----------------------------------------------------------
    def sops_config(self, current: bytes | None) -> bytes | None:
        """What `<folder>/.sops.yaml` should hold; None to leave it as it is (someone's own)."""
        if not self.recipients or (current is not None and not managed_sops_config(current)):
            return None
        layout = self.layout

        def template(group: str, resource: str) -> str:
            return layout.per_type.get((group, resource), layout.default)

        return sops_config(self.rules, template, self.recipients).encode()

    def recipients_of(self, data: bytes) -> frozenset[str] | None:
        """The age recipients of a file this renderer can re-encrypt; None otherwise."""
        from kubescribe.secrets.sops import SopsError, inspect_document  # noqa: PLC0415

        if not self._identities:
            return None
        try:
            info = inspect_document(data)
        except SopsError:
            return None
        return frozenset(info.recipients) if info.simple else None

    def rekey(self, identity: Identity, data: bytes) -> bytes:
        """The same content encrypted for `recipients`, under the data key the operator
        derives for them: any recipient change rotates the key (a removed recipient, or one
        who replays an old file, never holds the new key).

        Only a file the operator wrote (under the key it derives for the file's recipients)
        is re-encrypted: content someone else put there must not come out under the
        operator's key, where keeping or replacing it later would confirm a guessed value.
        """
        from kubescribe.secrets.sops import (  # noqa: PLC0415
            ForeignKeyError,
            SopsError,
            decrypt_document,
            encrypt_document,
            inspect_document,
        )

        what = f"{identity.kind} {identity.ref}"
        try:
            info = inspect_document(data)
            own_keys = self._own_keys(identity, info.recipients)
            try:
                plain = decrypt_document(data, self._identities, own_keys=own_keys)
            except ForeignKeyError:
                raise RefusedContent(
                    c.REENCRYPT_FAILED,
                    f"{what} not re-encrypted: its data key is not the operator's (the file was"
                    " written by someone else); the next change of the object rewrites it",
                ) from None
            return encrypt_document(
                plain,
                self.recipients,
                rule=info.rule,
                now=self._clock(),
                own_keys=self._own_keys(identity, self.recipients),
            )
        except (SopsError, ValueError) as err:
            raise RefusedContent(c.REENCRYPT_FAILED, f"{what} not re-encrypted: {err}") from None


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def unencrypted_renderer() -> SopsRenderer:
    """For writers without encryption: ordinary documents in plain YAML, Secrets refused."""
    return SopsRenderer()


# --- resolving a target's encryption ----------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """A target's encryption as resolved in one reconcile."""

    renderer: SopsRenderer
    condition: Cond | None
    configured: bool  # spec.encryption is set
    rules: Rules = field(default_factory=lambda: dict(DEFAULT_RULES))

    @property
    def usable(self) -> bool:
        return bool(self.renderer.recipients)


class _KeyProblem(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _identities_from(secret: Mapping[str, Any], name: str) -> list[str]:
    """Identities of every `*.agekey` entry (sorted by key); raises `_KeyProblem`."""
    from kubescribe.secrets import age  # noqa: PLC0415

    data = secret.get("data") or {}
    found: list[str] = []
    for key in sorted(k for k in data if k.endswith(AGE_KEY_SUFFIX)):
        try:
            text = base64.b64decode(data[key], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, TypeError):
            raise _KeyProblem(c.INVALID_KEY, f"Secret {name!r} key {key!r} is not text") from None
        try:
            identities = age.parse_identities(text)
        except ValueError as err:  # names a line, never key material
            raise _KeyProblem(c.INVALID_KEY, f"Secret {name!r} key {key!r}: {err}") from None
        if not identities:
            raise _KeyProblem(c.INVALID_KEY, f"Secret {name!r} key {key!r} holds no age identity")
        found += identities
    return found


def _key_file(identity: str, recipient: str) -> str:
    stamp = _now().strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"# created: {stamp}\n# public key: {recipient}\n{identity}\n"


class EncryptionResolver:
    """Resolves every writable target's encryption each reconcile, and says which watch
    streams must start over (re-list) because documents were refused or rendered under other
    rules than now."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._resolved: dict[TargetKey, Resolution] = {}
        self._memos: dict[TargetKey, dict[bytes, bytes]] = {}
        self._resync: set[str] = set()

    # -- queries used by the manager ---------------------------------------------------------
    def renderer(self, key: TargetKey) -> SopsRenderer:
        resolved = self._resolved.get(key)
        return resolved.renderer if resolved is not None else unencrypted_renderer()

    def conditions(self, key: TargetKey) -> list[Cond]:
        resolved = self._resolved.get(key)
        return [resolved.condition] if resolved is not None and resolved.condition else []

    def status(self, key: TargetKey) -> dict[str, Any]:
        resolved = self._resolved.get(key)
        if resolved is None or not resolved.configured:
            return {}
        return {"encryption": {"recipients": list(resolved.renderer.recipients)}}

    def take_resyncs(self) -> set[str]:
        """Stream keys to restart (their snapshot re-renders every document)."""
        out, self._resync = self._resync, set()
        return out

    # -- reconcile ---------------------------------------------------------------------------
    async def refresh(self, plan: Plan) -> None:
        wanted = {key: t for key, t in plan.targets.items() if t.writable}
        for key in [k for k in self._resolved if k not in wanted]:
            del self._resolved[key]
            self._memos.pop(key, None)
        for key, target in wanted.items():
            old = self._resolved.get(key)
            try:
                new = await self._resolve(target, plan)
            except SecretUnavailable as exc:
                if old is not None and old.usable:
                    continue  # keep writing with what was read last time
                new = self._failed(target, c.SECRET_UNAVAILABLE, str(exc))
            except Exception:
                log.exception("encryption.resolve_failed", target=str(key))
                continue
            self._resync |= _resyncs(old, new, plan, key)
            self._resolved[key] = new

    def _failed(self, target: TargetPlan, reason: str, message: str) -> Resolution:
        renderer = SopsRenderer(refusal=(reason, message), layout=target.layout)
        return Resolution(renderer, Cond(c.ENCRYPTION_CONFIGURED, "False", reason, message), True)

    async def _resolve(self, target: TargetPlan, plan: Plan) -> Resolution:
        from kubescribe.secrets import age  # noqa: PLC0415

        assert target.spec is not None
        spec = target.spec.encryption
        if spec is None:
            return _unconfigured(target, plan)
        try:
            rules = compile_rules(spec.sensitive_types)
        except PolicyError as err:
            return self._failed(target, c.INVALID_SENSITIVE_TYPE, str(err))
        try:
            recipients = _inline_recipients(spec)
            identities = await self._identities(target.key.namespace, target.spec)
        except _KeyProblem as err:
            return self._failed(target, err.reason, err.message)
        recipients += [age.recipient_of(i) for i in identities]
        recipients = list(dict.fromkeys(recipients))
        if not recipients:  # the CRD's CEL rules prevent this; never write without any
            return self._failed(target, c.ENCRYPTION_MISSING, "spec.encryption names no recipient")
        renderer = SopsRenderer(
            recipients=recipients,
            identities=identities,
            rules=rules,
            layout=target.layout,
            memo=self._memos.setdefault(target.key, {}),
        )
        types = ", ".join(
            resource if not group else f"{group}/{resource}" for group, resource in sorted(rules)
        )
        message = f"Encrypting {types} for {_plural(len(recipients), 'age recipient')}"
        if not identities:
            message += (
                "; the operator holds no age identity (ageKeySecretRef), so it cannot read its"
                " files back and encrypts unchanged documents again after a restart"
            )
        cond = Cond(c.ENCRYPTION_CONFIGURED, "True", c.ENCRYPTION_CONFIGURED, message)
        return Resolution(renderer, cond, True, rules)

    async def _identities(self, namespace: str, spec: GitTargetSpec) -> list[str]:
        encryption = spec.encryption
        assert encryption is not None
        ref = encryption.age_key_secret_ref
        if ref is None:
            return []
        secret = await read_object(self.client, "secrets", namespace, ref.name)
        if secret is None:
            if not encryption.generate_when_missing:
                raise _KeyProblem(
                    c.SECRET_NOT_FOUND, f"Secret {ref.name!r} (ageKeySecretRef) not found"
                )
            return [await self._generate(namespace, ref.name, None)]
        identities = _identities_from(secret, ref.name)
        if identities:
            return identities
        if not encryption.generate_when_missing:
            raise _KeyProblem(
                c.INVALID_KEY, f"Secret {ref.name!r} holds no *{AGE_KEY_SUFFIX} entry"
            )
        if not created_by_kubescribe(secret):
            raise _KeyProblem(
                c.INVALID_KEY, not_ours_message(ref.name, f"a *{AGE_KEY_SUFFIX} entry")
            )
        return [await self._generate(namespace, ref.name, secret)]

    async def _generate(self, namespace: str, name: str, secret: Mapping[str, Any] | None) -> str:
        """A new age identity stored in the Secret (created, or added to the operator's own)."""
        from kubescribe.secrets import age  # noqa: PLC0415

        identity, recipient = age.generate_identity()
        await write_generated(
            self.client,
            namespace,
            name,
            {GENERATED_KEY: _key_file(identity, recipient).encode()},
            backup_note=BACKUP_NOTE,
            existing=secret,
            precondition=False,
        )
        log.info(
            "encryption.key_generated",
            namespace=namespace,
            secret=name,
            key=GENERATED_KEY,
            recipient=recipient,
        )
        return identity


def _inline_recipients(spec: EncryptionSpec) -> list[str]:
    from kubescribe.secrets import age  # noqa: PLC0415

    out = []
    for i, recipient in enumerate(spec.recipients):
        try:
            out.append(age.check_recipient(recipient.strip()))
        except ValueError:
            raise _KeyProblem(
                c.INVALID_KEY, f"spec.encryption.recipients[{i}] is not a valid age recipient"
            ) from None
    return out


def _sensitive_streams(plan: Plan, key: TargetKey, rules: Rules) -> list[str]:
    return [s.key for s in plan.streams_of(key) if (s.rtype.group, s.rtype.resource) in rules]


def _unconfigured(target: TargetPlan, plan: Plan) -> Resolution:
    message = "spec.encryption is not set: Secrets are not written to Git"
    renderer = SopsRenderer(refusal=(c.ENCRYPTION_MISSING, message), layout=target.layout)
    cond = None
    if _sensitive_streams(plan, target.key, DEFAULT_RULES):
        cond = Cond(
            c.ENCRYPTION_CONFIGURED,
            "False",
            c.ENCRYPTION_MISSING,
            f"Watching Secrets but {message}",
        )
    return Resolution(renderer, cond, False)


def _resyncs(old: Resolution | None, new: Resolution, plan: Plan, key: TargetKey) -> set[str]:
    """Streams whose documents must be rendered again: refused ones can now be written,
    sensitive types changed rules, or recipients changed and the worker cannot re-encrypt
    the files itself (no identity, or an identity its data keys derive from was removed)."""
    if old is None or not new.usable:
        return set()
    if not old.usable:
        return set(_sensitive_streams(plan, key, new.rules))
    changed = {
        gr for gr in set(old.rules) | set(new.rules) if old.rules.get(gr) != new.rules.get(gr)
    }
    out = {s.key for s in plan.streams_of(key) if (s.rtype.group, s.rtype.resource) in changed}
    recipients_changed = set(old.renderer.recipients) != set(new.renderer.recipients)
    removed = old.renderer.identity_recipients - new.renderer.identity_recipients
    if recipients_changed and (removed or not new.renderer.can_decrypt):
        out |= set(_sensitive_streams(plan, key, new.rules))
    return out
