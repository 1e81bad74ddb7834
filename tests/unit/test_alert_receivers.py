"""The Slack and Alertmanager receivers' pure parts: the bodies rendered from an Alert message
(who, what, when, the commit; hostile names escaped; keys a change gains later flow through),
Alertmanager's endpoint, and the one-receiver rule of an Alert's spec."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubescribe.api import conditions as c
from kubescribe.controller.alert_delivery import DeliveryFailed, secret_text
from kubescribe.controller.alertmanager import AlertmanagerMessage
from kubescribe.controller.alerts import _Message, _outgoing, _route, route_conditions
from kubescribe.controller.slack import SlackMessage
from kubescribe.mirror.alertmanager import ALERTNAME, alertmanager_body, endpoint
from kubescribe.mirror.alerts import event_of, message_body
from kubescribe.mirror.authors import Author
from kubescribe.mirror.changes import Change, Operation, TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.slack import SECTION_LIMIT, TEXT_LIMIT, escape, slack_body

DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False)
SHA = "3f1c" * 10
SENT_AT = 1_764_771_234.5  # 2025-12-03T14:13:54.500Z


def message(*changes: dict[str, Any], count: int | None = None) -> dict[str, Any]:
    """A message as `mirror.alerts.message_body` writes it (parsed)."""
    return {
        "schema": "kubescribe.io/alert/v1",
        "alert": "team/outside-gitops",
        "sentAt": SENT_AT,
        "count": len(changes) if count is None else count,
        "omitted": 0,
        "commits": [SHA],
        "changes": list(changes),
    }


def told(
    username: str = "alice",
    name: str = "web",
    paths: list[str] | None = None,
    operation: str = "UPDATE",
    namespace: str = "web",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "who": {
            "author": f"{username} <{username}@example.org>",
            "username": username,
            "fieldManager": "kubectl",
        },
        "what": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "namespace": namespace,
            "name": name,
            "operation": operation,
            "fieldPaths": ["spec.replicas"] if paths is None else paths,
        },
        "commit": SHA,
        "target": "team/prod",
        "observedAt": SENT_AT - 1.0,
        **extra,
    }


def slack(msg: dict[str, Any]) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(slack_body(msg))
    return parsed


def texts(body: dict[str, Any]) -> list[str]:
    """Every mrkdwn text of a Slack body: `text` and each block's."""
    found = [body["text"]]
    for block in body["blocks"]:
        found += [block["text"]["text"]] if "text" in block else []
        found += [e["text"] for e in block.get("elements", [])]
    return found


def test_the_slack_body_names_who_what_when_and_the_commit() -> None:
    body = slack(message(told()))
    assert "alice" in body["text"]
    assert "spec.replicas" in body["text"]
    assert SHA in body["text"]
    head, section = (b["text"]["text"] for b in body["blocks"])
    assert head == "*team/outside-gitops*: 1 change in the cluster"
    assert section.splitlines() == [
        "*UPDATE* Deployment *web/web* by *alice* (kubectl)",
        "Fields: spec.replicas",
        "When: 2025-12-03T14:13:53.500Z",
        f"Commit: {SHA} (target team/prod)",
    ]
    assert all(b["text"]["type"] == "mrkdwn" for b in body["blocks"])


def test_hostile_names_are_escaped_and_cannot_break_their_line() -> None:
    body = slack(
        message(told("<!channel> & <https://evil.example|click>", "a>b", ["x\n*Commit*: 0"]))
    )
    for text in texts(body):
        assert "<!channel>" not in text
        assert "<https://evil" not in text
        assert "\n*Commit*: 0" not in text
    section = body["blocks"][1]["text"]["text"]
    assert "*&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;*" in section
    assert "*web/a&gt;b*" in section
    assert "Fields: x *Commit*: 0" in section


@given(
    st.text(max_size=400),
    st.text(max_size=400),
    st.lists(st.text(max_size=300), max_size=60),
    st.dictionaries(st.text(max_size=20), st.text(max_size=600), max_size=5),
)
def test_any_slack_body_is_escaped_and_within_slacks_limits(
    username: str, name: str, paths: list[str], extra: dict[str, str]
) -> None:
    changes = [{**told(username, name, paths), **extra} for _ in range(30)]
    body = slack(message(*changes, count=130))
    assert len(body["blocks"]) <= 50
    assert len(body["text"]) <= TEXT_LIMIT
    for block in body["blocks"]:
        if "text" in block:
            assert len(block["text"]["text"]) <= SECTION_LIMIT
    for text in texts(body):
        unlinked = re.sub(r"<https?://[^\s<>|]+\|[^<>|]*>", "", text)  # a link it found
        assert "<" not in unlinked
        assert ">" not in unlinked
        assert not re.search(r"&(?!amp;|lt;|gt;)", unlinked)  # every & is an escape
    first = body["blocks"][1]["text"]["text"].splitlines()
    assert first[0].startswith("*UPDATE* Deployment *")  # who and what always fit
    assert first[1].startswith("Fields: ")


def test_a_long_burst_lists_twenty_and_counts_the_rest() -> None:
    body = slack(message(*(told(name=f"web-{i}") for i in range(100)), count=130))
    assert body["blocks"][0]["text"]["text"].endswith("130 changes in the cluster")
    assert len(body["blocks"]) == 1 + 20 + 1
    assert body["blocks"][-1]["elements"][0]["text"] == "110 more changes not listed"


def test_keys_a_change_gains_later_reach_both_receivers_and_a_commit_link_is_used() -> None:
    """The message may grow (GitOps ownership, a commit link): nothing is lost on the way."""
    link = f"https://git.example.org/team/repo/commit/{SHA}"
    change = told(gitops={"owner": "Flux", "kustomization": "apps/web"}, commitUrl=link)
    section = slack(message(change))["blocks"][1]["text"]["text"]
    assert f"Commit: <{link}|{SHA}>" in section
    assert 'gitops: {"kustomization":"apps/web","owner":"Flux"}' in section
    (alert,) = json.loads(alertmanager_body(message(change), 600))
    assert alert["generatorURL"] == link
    assert alert["annotations"]["gitops"] == '{"kustomization":"apps/web","owner":"Flux"}'
    assert "commitUrl" not in alert["annotations"]
    # A commit given as an object with its link.
    nested = told(commit={"sha": SHA, "url": link})
    assert f"<{link}|{SHA}>" in slack(message(nested))["blocks"][1]["text"]["text"]
    (alert,) = json.loads(alertmanager_body(message(nested), 600))
    assert (alert["annotations"]["commit"], alert["generatorURL"]) == (SHA, link)


def test_a_link_that_could_break_out_of_slacks_link_syntax_is_not_a_link() -> None:
    change = told(commitUrl="https://git.example.org/x|<!channel>")
    section = slack(message(change))["blocks"][1]["text"]["text"]
    assert f"Commit: {SHA}" in section
    assert "<!channel>" not in section
    (alert,) = json.loads(alertmanager_body(message(change), 600))
    assert "generatorURL" not in alert


def test_the_alertmanager_alerts_carry_labels_annotations_and_resolve_by_themselves() -> None:
    (alert,) = json.loads(alertmanager_body(message(told()), 600))
    assert alert["labels"] == {
        "alertname": ALERTNAME,
        "alert": "team/outside-gitops",
        "kind": "Deployment",
        "namespace": "web",
        "name": "web",
        "operation": "UPDATE",
        "author": "alice",
    }
    assert alert["annotations"] == {
        "summary": "alice UPDATE Deployment web/web: spec.replicas",
        "fieldPaths": "spec.replicas",
        "commit": SHA,
        "author": "alice <alice@example.org>",
        "fieldManager": "kubectl",
        "target": "team/prod",
    }
    assert alert["startsAt"] == "2025-12-03T14:13:53.500Z"
    assert alert["endsAt"] == "2025-12-03T14:23:54.500Z"  # sent + 600 s
    assert "generatorURL" not in alert


def test_changes_with_the_same_labels_are_one_alert_with_their_paths_joined() -> None:
    later = told(paths=["spec.template.spec.containers[web].image"])
    later["observedAt"], later["commit"] = SENT_AT - 0.5, "b" * 40
    other = told("bob")
    alerts = json.loads(alertmanager_body(message(told(), later, other), 600))
    assert [a["labels"]["author"] for a in alerts] == ["alice", "bob"]
    joined = alerts[0]
    assert joined["annotations"]["fieldPaths"] == (
        "spec.replicas, spec.template.spec.containers[web].image"
    )
    assert joined["annotations"]["commit"] == "b" * 40
    assert joined["annotations"]["commits"] == f"{SHA}, {'b' * 40}"
    assert joined["annotations"]["changes"] == "2"
    assert joined["startsAt"] == "2025-12-03T14:13:53.500Z"  # the first


def test_a_cluster_scoped_change_by_an_unknown_author_with_unknown_paths() -> None:
    change = told("", "team-a", namespace="")
    change["who"] = {"author": "", "username": "", "fieldManager": ""}
    change["what"]["kind"], change["what"]["fieldPaths"] = "Namespace", None
    (alert,) = json.loads(alertmanager_body(message(change), 600))
    assert "namespace" not in alert["labels"]
    assert alert["labels"]["author"] == "unknown"
    assert alert["annotations"]["fieldPaths"] == "unknown"
    section = slack(message(change))["blocks"][1]["text"]["text"]
    assert "Namespace *team-a* by *an unknown author*" in section
    assert "Fields: unknown" in section


def test_a_hostile_message_renders_without_raising() -> None:
    odd: dict[str, Any] = {
        "alert": ["not", "a", "string"],
        "sentAt": "soon",
        "count": -3,
        "changes": [None, "x", {"who": 1, "what": [], "commit": 5, "observedAt": 1e300}, {}],
    }
    assert len(slack(odd)["blocks"]) == 3
    assert len(json.loads(alertmanager_body(odd, 600))) == 1


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://am:9093", "http://am:9093/api/v2/alerts"),
        ("http://am:9093/", "http://am:9093/api/v2/alerts"),
        ("https://mon.example.org/alertmanager/", "https://mon.example.org/alertmanager/api/v2/alerts"),
        ("http://am:9093/?x=1#top", "http://am:9093/api/v2/alerts?x=1"),
    ],
)  # fmt: skip
def test_alertmanagers_endpoint_follows_a_route_prefix(base: str, url: str) -> None:
    assert endpoint(base) == url


def test_escape_is_slacks_three_characters() -> None:
    assert escape("a & <b> *c*") == "a &amp; &lt;b&gt; *c*"


def _alert(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "a", "namespace": "team", "generation": 1}, "spec": spec}


SLACK = {"slack": {"urlSecretRef": {"name": "slack", "key": "url"}}}
AM = {"alertmanager": {"url": "http://am.example.org:9093"}}
HOOK = {"webhook": {"url": "https://h.example.org/"}}


@pytest.mark.parametrize(
    ("spec", "reason", "says"),
    [
        ({}, c.INVALID_SPEC, "exactly one receiver"),
        ({**SLACK, **AM}, c.INVALID_SPEC, "exactly one receiver"),
        ({**HOOK, **SLACK}, c.INVALID_SPEC, "exactly one receiver"),
        ({"alertmanager": {"url": "http://169.254.169.254/"}}, c.URL_REFUSED, "metadata"),
        ({"alertmanager": {"url": "http://user:pw@am.example.org/"}}, c.URL_REFUSED, "Credent"),
        ({"alertmanager": {"url": "http://am/", "resolveAfterSeconds": 1}}, c.INVALID_SPEC, ""),
        ({"slack": {"urlSecretRef": {"name": "slack", "key": "a/b"}}}, c.INVALID_SPEC, ""),
        ({"slack": {"urlSecretRef": "slack"}}, c.INVALID_SPEC, ""),
    ],
)
def test_a_receiver_spec_that_cannot_work_is_a_reason(
    spec: dict[str, Any], reason: str, says: str
) -> None:
    ready = route_conditions(_route(("team", "a"), _alert(spec)))[0]
    assert (ready.type, ready.status, ready.reason) == (c.READY, "False", reason)
    assert says in ready.message


@pytest.mark.parametrize("spec", [SLACK, AM, HOOK])
def test_each_receiver_alone_is_ready(spec: dict[str, Any]) -> None:
    ready = route_conditions(_route(("team", "a"), _alert(spec)))[0]
    assert (ready.status, ready.reason) == ("True", c.READY)


def test_each_receiver_gets_its_body_rendered_from_the_webhook_message() -> None:
    author = Author("Alice", "alice@example.org", "audit", "alice")
    identity = Identity("apps", "Deployment", "web", "web")
    change = Change(TargetKey("team", "prod"), Operation.UPDATE, identity, DEPLOYMENTS, {}, 0.0)
    body = message_body("team/a", [event_of(change, SHA, author, ("spec.replicas",), 1.0)], 2.0)
    key = ("team", "a")
    routed = {}
    for name, spec in (("slack", SLACK), ("am", AM), ("hook", HOOK)):
        parsed = _route(key, _alert(spec)).spec
        assert parsed is not None
        routed[name] = _outgoing(key, parsed, body, 1)
    assert isinstance(routed["hook"], _Message)
    assert routed["hook"].body == body
    slack_message = routed["slack"]
    assert isinstance(slack_message, SlackMessage)
    assert slack_message.body == slack_body(json.loads(body))
    assert slack_message.url_ref.name == "slack"
    am_message = routed["am"]
    assert isinstance(am_message, AlertmanagerMessage)
    assert am_message.url == "http://am.example.org:9093/api/v2/alerts"
    (alert,) = json.loads(am_message.body)
    assert alert["labels"]["author"] == "alice"
    assert alert["endsAt"] == "1970-01-01T01:00:02.000Z"  # resolveAfterSeconds: 3600 by default


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (b"https://hooks.example.org/services/T/B/x\n", "https://hooks.example.org/services/T/B/x"),
        (b"  tok3n  ", "tok3n"),
        (b"https://a/\r\nX-Evil: 1", None),
        (b"two words", None),
        ("t\u00f6ken".encode(), None),
        (b"\n", None),
    ],
)
def test_a_secret_value_is_one_line_of_printable_ascii(value: bytes, ok: str | None) -> None:
    if ok is not None:
        assert secret_text(value, "team", "s", "k") == ok
        return
    with pytest.raises(DeliveryFailed) as failed:
        secret_text(value, "team", "s", "k")
    assert (failed.value.reason, failed.value.retry) == (c.SECRET_INVALID, False)
    assert "Evil" not in failed.value.message
