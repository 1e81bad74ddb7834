"""The `Alert` kind's spec and status: which changes of the GitTargets in its namespace are
told to a receiver, grouped and rate limited (docs/alerts.md)."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from kubescribe.api.gittarget import IgnoreIdentities
from kubescribe.api.schema import (
    NAME_RULE,
    ApiModel,
    LocalObjectReference,
    Status,
    cel,
    defaulted,
)

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


class SecretKeyReference(ApiModel):
    """A key of a Secret in the Alert's own namespace."""

    name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the Secret (in the Alert's namespace).",
        json_schema_extra=cel(NAME_RULE),
    )
    key: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key in the Secret's `data`.",
    )


class SlackReceiver(ApiModel):
    """A Slack-compatible incoming webhook (Slack, Mattermost, Rocket.Chat…)."""

    url_secret_ref: SecretKeyReference = Field(
        description=(
            "The key of a Secret in the Alert's namespace that holds the incoming webhook URL"
            " (it carries a token). The URL is read before each message and checked by the"
            " same address policy as Git URLs."
        )
    )


class AlertmanagerReceiver(ApiModel):
    """Prometheus Alertmanager: each change becomes an alert, routed and silenced there."""

    url: str = Field(
        min_length=1,
        max_length=2048,
        description=(
            "Alertmanager's base URL (`http://alertmanager.monitoring:9093`); alerts are POSTed"
            " to `<url>/api/v2/alerts`. Checked by the same address policy as Git URLs."
        ),
    )
    bearer_token_secret_ref: SecretKeyReference | None = Field(
        None,
        description=(
            "The key of a Secret in the Alert's namespace whose value is sent as"
            " `Authorization: Bearer <token>`."
        ),
    )
    resolve_after_seconds: int = Field(
        3600,
        ge=60,
        le=7 * 86400,
        description="Each alert's `endsAt`: it resolves by itself this long after it is sent.",
    )


_ONE_RECEIVER = "exactly one receiver: webhook, slack or alertmanager"


class DeliverySpec(ApiModel):
    """How long a message is retried: attempts with exponential backoff from 1 s."""

    attempts: int = Field(
        8,
        ge=1,
        le=30,
        description=(
            "Tries per message (8: about 100 s to 2 minutes of a receiver down or answering"
            " 5xx/408/429). An Alert's messages go in order: one being retried holds the"
            " Alert's later ones, never another Alert's."
        ),
    )
    max_backoff_seconds: int = Field(
        60, ge=1, le=600, description="Cap of the doubling wait between two tries."
    )


class AlertSpec(ApiModel):
    """Desired state of an Alert."""

    selector: AlertSelector = defaulted(AlertSelector, "Which changes are told.")
    webhook: WebhookReceiver | None = Field(
        None, description="A generic JSON webhook (one of webhook, slack, alertmanager)."
    )
    slack: SlackReceiver | None = Field(
        None,
        description="A Slack-compatible incoming webhook (one of webhook, slack, alertmanager).",
    )
    alertmanager: AlertmanagerReceiver | None = Field(
        None, description="Prometheus Alertmanager's API (one of webhook, slack, alertmanager)."
    )
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

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "(has(self.webhook) ? 1 : 0) + (has(self.slack) ? 1 : 0)"
                " + (has(self.alertmanager) ? 1 : 0) == 1",
                f"needs {_ONE_RECEIVER}",
            )
        )
    )

    @model_validator(mode="after")
    def _one_receiver(self) -> Self:
        """The CEL rule again, for an object the API server admitted under an older CRD."""
        if sum(r is not None for r in (self.webhook, self.slack, self.alertmanager)) != 1:
            raise ValueError(f"spec needs {_ONE_RECEIVER}")
        return self


class AlertStatus(Status):
    """Observed state of an Alert."""

    last_sent_at: str | None = Field(None, description="When the last message was delivered.")
    messages_sent: int | None = Field(None, ge=0, description="Messages delivered since start.")
