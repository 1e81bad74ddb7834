"""The `Alert` kind's spec and status: which changes of the GitTargets in its namespace are
told to a receiver, grouped and rate limited (docs/alerts.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kubescribe.api.gittarget import IgnoreIdentities
from kubescribe.api.schema import ApiModel, LocalObjectReference, Status, defaulted

_Word = Annotated[str, Field(min_length=1, max_length=253)]
_Path = Annotated[str, Field(min_length=1, max_length=1024)]


class AlertSelector(ApiModel):
    """Which changes an Alert tells of; an empty list matches everything. Only changes
    written by the GitTargets of the Alert's own namespace are ever seen."""

    kinds: list[_Word] = Field(
        default_factory=list, max_length=64, description="Kinds (e.g. `Deployment`)."
    )
    namespaces: list[_Word] = Field(
        default_factory=list, max_length=64, description="Namespaces of the changed objects."
    )
    operations: list[Literal["CREATE", "UPDATE", "DELETE"]] = Field(
        default_factory=list, max_length=3, description="CREATE, UPDATE, DELETE."
    )
    authors: list[_Word] = Field(
        default_factory=list,
        max_length=64,
        description="Usernames the change must be by (empty: anyone, unknown authors too).",
    )
    exclude_authors: IgnoreIdentities = defaulted(
        IgnoreIdentities,
        "Identities whose changes are not told (users, ServiceAccounts `ns/name` or `ns/*`,"
        " field managers), matched as GitTarget `spec.ignore.changesBy`: e.g. Flux's and"
        " Argo CD's.",
    )
    field_paths: list[_Path] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "Field paths (`spec.replicas`, `spec.template`); a change matches when a path it"
            " changed is one of them or below one. A change whose paths are unknown matches"
            " no list."
        ),
    )


class WebhookReceiver(ApiModel):
    """A generic JSON webhook: the body is POSTed, signed with HMAC-SHA256."""

    url: str = Field(
        min_length=1,
        max_length=2048,
        description=(
            "`https://` or `http://` URL; checked by the same address policy as Git URLs"
            " (metadata and link-local addresses are refused)."
        ),
    )
    secret_ref: LocalObjectReference | None = Field(
        None,
        description=(
            "Secret in the Alert's namespace whose `hmacKey` signs the body: header"
            " `X-Kubescribe-Signature: sha256=<hex>`. Without it the body is not signed."
        ),
    )


class DeliverySpec(ApiModel):
    """How long a message is retried: attempts with exponential backoff from 1 s."""

    attempts: int = Field(
        8,
        ge=1,
        le=30,
        description=(
            "Tries per message (8: about 100 s to 2 minutes of a receiver down or answering"
            " 5xx/408/429). The queue is shared: a message being retried holds the ones"
            " behind it."
        ),
    )
    max_backoff_seconds: int = Field(
        60, ge=1, le=600, description="Cap of the doubling wait between two tries."
    )


class AlertSpec(ApiModel):
    """Desired state of an Alert."""

    selector: AlertSelector = defaulted(AlertSelector, "Which changes are told.")
    webhook: WebhookReceiver = Field(description="Where messages are sent.")
    group_window_seconds: int = Field(
        10,
        ge=0,
        le=3600,
        description="Changes within this many seconds of the first are one message (a burst).",
    )
    max_messages_per_hour: int = Field(
        60, ge=1, le=3600, description="Messages past this rate are dropped and counted."
    )
    delivery: DeliverySpec = defaulted(DeliverySpec, "Retries of a failed delivery.")
    suspend: bool = Field(False, description="Send nothing while true.")


class AlertStatus(Status):
    """Observed state of an Alert."""

    last_sent_at: str | None = Field(None, description="When the last message was delivered.")
    messages_sent: int | None = Field(None, ge=0, description="Messages delivered since start.")
