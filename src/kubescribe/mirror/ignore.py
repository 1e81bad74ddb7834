"""Changes a target does not record, by who made them (`GitTarget.spec.ignore.changesBy`).

A GitOps tool (Flux, Argo CD) applies what a folder already holds; mirroring its writes back
only repeats the folder. The rule names the tool's identities, and a change is dropped when:

1. `fieldManagers`: the change's field manager is listed. The field manager of a change is
   the manager of the newest `metadata.managedFields` entry (`latest_manager`: a sole
   newest entry; when managers share the newest second, none is). Known from the object
   itself, so it works without attribution; deletes carry no managedFields and never match.
2. `users`: the username of the request that made the change (after impersonation: kubectl
   `--as` counts as the impersonated user) is listed, exactly as the API server authenticated
   it (`alice`, `oidc:alice@example.org`).
3. `serviceAccounts`: the change was made by `system:serviceaccount:<namespace>:<name>` and
   `namespace/name` (or `namespace/*`, any service account of the namespace) is listed.

Usernames come from attribution (audit or the change admission webhook). When none is known
the change is recorded: a change is never dropped on a guess.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
MAX_USERNAME = 512  # what attribution stores (`attribution.decode.FIELD_CAPS`)
MAX_MANAGER = 128  # the API server's limit on a field manager's name
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class IgnoredBy(enum.StrEnum):
    """Which list dropped a change (the `by` label of `kubescribe_changes_ignored_total`)."""

    FIELD_MANAGER = "fieldmanager"
    USER = "user"
    SERVICE_ACCOUNT = "serviceaccount"


class InvalidIgnore(ValueError):
    """An entry of `spec.ignore.changesBy` that can never match; the message names it."""


@dataclass(frozen=True)
class IgnoreRule:
    """The identities whose changes a target drops (see the module docstring)."""

    users: frozenset[str] = frozenset()
    service_accounts: frozenset[tuple[str, str]] = frozenset()  # (namespace, name or "*")
    field_managers: frozenset[str] = frozenset()

    @classmethod
    def parse(
        cls,
        users: Iterable[str] = (),
        service_accounts: Iterable[str] = (),
        field_managers: Iterable[str] = (),
    ) -> IgnoreRule:
        """The rule of `spec.ignore.changesBy`; `InvalidIgnore` for an entry that is empty,
        too long or (service accounts) not `namespace/name` or `namespace/*`."""
        where = "spec.ignore.changesBy"
        for i, user in enumerate(users):
            if not user.strip() or len(user) > MAX_USERNAME:
                raise InvalidIgnore(f"{where}.users[{i}]: {user[:64]!r} is not a username")
        accounts = []
        for i, entry in enumerate(service_accounts):
            namespace, _, name = entry.partition("/")
            if not (
                _DNS_LABEL.fullmatch(namespace) and (name == "*" or _DNS_SUBDOMAIN.fullmatch(name))
            ):
                raise InvalidIgnore(
                    f"{where}.serviceAccounts[{i}]: {entry[:300]!r} is not namespace/name or"
                    " namespace/* (e.g. flux-system/kustomize-controller)"
                )
            accounts.append((namespace, name))
        for i, manager in enumerate(field_managers):
            if not manager.strip() or len(manager) > MAX_MANAGER:
                raise InvalidIgnore(
                    f"{where}.fieldManagers[{i}]: {manager[:64]!r} is not a field manager name"
                    f" (1 to {MAX_MANAGER} characters)"
                )
        return cls(frozenset(users), frozenset(accounts), frozenset(field_managers))

    def __bool__(self) -> bool:
        return bool(self.users or self.service_accounts or self.field_managers)

    @property
    def needs_author(self) -> bool:
        """Whether matching needs the username of a change (attribution)."""
        return bool(self.users or self.service_accounts)

    def ignores(self, field_manager: str, username: str) -> IgnoredBy | None:
        """Which list drops a change made through `field_manager` by `username` ('' when
        unknown), or None: record it. Field managers are checked first (no attribution)."""
        if field_manager and field_manager in self.field_managers:
            return IgnoredBy.FIELD_MANAGER
        if not username:
            return None
        if not username.startswith(SERVICE_ACCOUNT_PREFIX):
            return IgnoredBy.USER if username in self.users else None
        namespace, _, name = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
        listed = {(namespace, name), (namespace, "*")} & self.service_accounts
        if listed or username in self.users:
            return IgnoredBy.SERVICE_ACCOUNT
        return None


NO_IGNORE = IgnoreRule()
