"""The SOPS renderer of a GitTarget and the sensitive-type policy behind it.

Pure and fast, except that files are also read back (and `.sops.yaml` applied) with the real
`sops` binary from the venv, the oracle for compatibility.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.exceptions import InvalidTag

from kubescribe.api.conditions import ENCRYPTION_FAILED, ENCRYPTION_MISSING
from kubescribe.api.gittarget import SensitiveType
from kubescribe.controller.encryption import (
    Resolution,
    SopsRenderer,
    _resyncs,
    unencrypted_renderer,
)
from kubescribe.controller.plan import Plan
from kubescribe.controller.streams import StreamSpec
from kubescribe.git.targets import Encrypting, PlainRenderer, RefusedContent
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.layout import Layout
from kubescribe.secrets import _cipher
from kubescribe.secrets import sops as sops_module
from kubescribe.secrets._re2 import compile_re2
from kubescribe.secrets.age import generate_identity, load_identities
from kubescribe.secrets.policy import (
    PolicyError,
    compile_rules,
    key_regex,
    managed_sops_config,
    path_regex,
)
from kubescribe.secrets.sops import decrypt_document, inspect_document
from tests import manifests

SOPS = shutil.which("sops", path=str(Path(sys.executable).parent))
needs_sops = pytest.mark.skipif(SOPS is None, reason="sops binary not found next to python")

SECRETS = ResourceType("", "v1", "secrets", "Secret", True)
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
WIDGETS = ResourceType("example.io", "v1", "widgets", "Widget", True)
CANARY = "canary-9f3b2c"
CANARY_B64 = base64.b64encode(CANARY.encode()).decode()
ALICE = generate_identity()
BOB = generate_identity()
CAROL = generate_identity()


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def secret(**data: str) -> dict[str, Any]:
    return manifests.secret("db", "demo", data, labels={"app": "db"})


def ident(rtype: ResourceType, name: str = "db") -> Identity:
    return Identity(rtype.group, rtype.kind, "demo", name)


def renderer(*keys: tuple[str, str], identities: bool = True, **kw: Any) -> SopsRenderer:
    keys = keys or (ALICE,)
    return SopsRenderer(
        recipients=[r for _, r in keys],
        identities=[i for i, _ in keys] if identities else [],
        clock=Clock(),
        **kw,
    )


def enc_values(data: bytes) -> dict[str, str]:
    doc = yaml.safe_load(data)
    return {k: v for k, v in doc["data"].items() if isinstance(v, str)}


def run_sops(args: list[str], cwd: Path, identity: str | None = None) -> bytes:
    assert SOPS is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOPS_")}
    env.update(HOME=str(cwd), XDG_CONFIG_HOME=str(cwd / ".xdg"))
    if identity is not None:
        env["SOPS_AGE_KEY"] = identity
    proc = subprocess.run(
        [SOPS, "--disable-version-check", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout


def data_key(data: bytes, identity: str = ALICE[0]) -> bytes:
    """The data key a sops file's stanzas wrap (a test's view; the operator never logs it)."""
    return sops_module._open(data, load_identities([identity])).key


def opens_any_value(data: bytes, key: bytes) -> bool:
    """Whether ``key`` decrypts any encrypted value of a sops Secret file."""
    for name, value in yaml.safe_load(data)["data"].items():
        enc = _cipher.parse(value)
        assert enc is not None
        try:
            _cipher.decrypt(key, enc, f"data:{name}:")
            return True
        except InvalidTag:
            continue
    return False


def planted(tmp_path: Path, recipient: str, **data: str) -> bytes:
    """A Secret file a repo writer made with the real sops binary, with no private key."""
    path = tmp_path / "planted.yaml"
    path.write_text(yaml.safe_dump(secret(**data), sort_keys=False))
    regex = "^(data|stringData)$"
    return run_sops(
        ["encrypt", "--age", recipient, "--encrypted-regex", regex, str(path)], tmp_path
    )


# --- the renderer -----------------------------------------------------------------------------


def test_ordinary_documents_are_plain_yaml() -> None:
    doc = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x"}, "data": {"a": "1"}}
    got = renderer().render(ident(CONFIGMAPS, "x"), CONFIGMAPS, doc, None)
    assert got == PlainRenderer().render(ident(CONFIGMAPS, "x"), CONFIGMAPS, doc, None)
    assert not renderer().encrypted(CONFIGMAPS)
    assert renderer().encrypted(SECRETS)


def test_a_secret_without_recipients_is_refused_without_its_value() -> None:
    for refusing in (unencrypted_renderer(), SopsRenderer(refusal=("SecretNotFound", "gone"))):
        assert refusing.encrypted(SECRETS)
        with pytest.raises(RefusedContent) as refused:
            refusing.render(ident(SECRETS), SECRETS, secret(password=CANARY), None)
        assert refused.value.reason in (ENCRYPTION_MISSING, "SecretNotFound")
        assert "Secret demo/db not written" in refused.value.message
        assert CANARY not in str(refused.value)
        assert CANARY_B64 not in str(refused.value)
    plain = unencrypted_renderer().render(
        ident(CONFIGMAPS), CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap"}, None
    )
    assert plain == b"apiVersion: v1\nkind: ConfigMap\n"


def test_a_secret_is_encrypted_for_sops_with_the_kubernetes_rule(tmp_path: Path) -> None:
    data = renderer(ALICE, BOB).render(ident(SECRETS), SECRETS, secret(password=CANARY), None)
    assert CANARY.encode() not in data
    assert CANARY_B64.encode() not in data
    text = data.decode()
    assert text.startswith("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n")
    assert "encrypted_regex: ^(data|stringData|annotations|labels)$" in text
    assert "type: Opaque" in text  # only data and stringData are encrypted
    assert set(inspect_document(data).recipients) == {ALICE[1], BOB[1]}
    assert decrypt_document(data, [BOB[0]]) == secret(password=CANARY)
    path = tmp_path / "db.sops.yaml"
    path.write_bytes(data)
    plain = run_sops(["decrypt", str(path)], tmp_path, identity=ALICE[0])
    assert yaml.safe_load(plain)["data"] == {"password": CANARY_B64}


@needs_sops
def test_label_and_annotation_values_are_encrypted_and_their_keys_stay(tmp_path: Path) -> None:
    label_canary = "lbl-4e1f9a"  # a valid label value
    doc = secret(password=CANARY)
    doc["metadata"]["labels"]["checksum"] = label_canary
    copy = json.dumps({"kind": "Secret", "stringData": {"password": CANARY}})
    doc["metadata"]["annotations"] = {"kapp.k14s.io/original": copy, "note": "note-7c2d"}
    data = renderer().render(ident(SECRETS), SECRETS, doc, None)
    for value in (CANARY, CANARY_B64, label_canary, "note-7c2d"):
        assert value.encode() not in data
    written = yaml.safe_load(data)["metadata"]
    assert (written["name"], written["namespace"]) == ("db", "demo")
    assert sorted(written["labels"]) == ["app", "checksum"]
    assert sorted(written["annotations"]) == ["kapp.k14s.io/original", "note"]
    assert all(v.startswith("ENC[AES256_GCM,") for v in written["annotations"].values())
    path = tmp_path / "db.sops.yaml"
    path.write_bytes(data)
    plain = yaml.safe_load(run_sops(["decrypt", str(path)], tmp_path, identity=ALICE[0]))
    assert plain["metadata"] == doc["metadata"]


def test_unchanged_plaintext_keeps_the_file_and_a_change_only_its_value() -> None:
    r = renderer()
    first = r.render(ident(SECRETS), SECRETS, secret(user="app", password=CANARY), None)
    again = r.render(ident(SECRETS), SECRETS, secret(user="app", password=CANARY), first)
    assert again == first
    changed = r.render(ident(SECRETS), SECRETS, secret(user="app", password="other"), first)
    before, after = enc_values(first), enc_values(changed)
    assert after["user"] == before["user"]
    assert after["password"] != before["password"]
    # A fresh renderer (an operator restart) holding the identity reads the file back.
    assert (
        renderer().render(ident(SECRETS), SECRETS, secret(user="app", password="other"), changed)
        == changed
    )


@needs_sops
@pytest.mark.parametrize("same_value", [False, True])
def test_a_planted_file_lends_no_data_key(tmp_path: Path, same_value: bool) -> None:
    planted_value = CANARY if same_value else "attacker-chosen"
    theirs = planted(tmp_path, ALICE[1], password=planted_value, user="app")
    their_key = data_key(theirs)  # the repo writer knows it: sops chose it for them
    for r in (renderer(), renderer(identities=False)):
        out = r.render(ident(SECRETS), SECRETS, secret(password=CANARY, user="app"), theirs)
        # Kept, the file would confirm a guessed value; reused, the key would open the new one.
        assert out != theirs
        assert not opens_any_value(out, their_key)
        assert data_key(out) != their_key
        path = tmp_path / "out.sops.yaml"
        path.write_bytes(out)
        plain = run_sops(["decrypt", str(path)], tmp_path, identity=ALICE[0])
        assert yaml.safe_load(plain)["data"]["password"] == CANARY_B64
    # Nor is its content ever re-encrypted under the operator's key (when recipients change).
    with pytest.raises(RefusedContent, match="not the operator's") as refused:
        renderer(ALICE, BOB).rekey(ident(SECRETS), theirs)
    assert refused.value.reason == "ReencryptFailed"


def test_the_data_key_is_the_operators_own_per_document_and_recipient_set() -> None:
    doc = secret(password=CANARY)
    first = renderer().render(ident(SECRETS), SECRETS, doc, None)
    assert data_key(first) == data_key(renderer().render(ident(SECRETS), SECRETS, doc, None))
    other_doc = renderer().render(ident(SECRETS, "other"), SECRETS, doc, None)
    assert data_key(other_doc) != data_key(first)
    other_key = renderer(BOB).render(ident(SECRETS), SECRETS, doc, None)
    assert data_key(other_key, BOB[0]) != data_key(first)


def test_without_an_identity_stability_holds_for_the_process_only() -> None:
    memo: dict[bytes, bytes] = {}
    r = renderer(identities=False, memo=memo)
    first = r.render(ident(SECRETS), SECRETS, secret(password=CANARY), None)
    assert r.render(ident(SECRETS), SECRETS, secret(password=CANARY), first) == first
    same_target = renderer(identities=False, memo=memo)  # rebuilt on the next reconcile
    assert same_target.render(ident(SECRETS), SECRETS, secret(password=CANARY), first) == first
    assert same_target.render(ident(SECRETS), SECRETS, secret(password="x"), first) != first
    restarted = renderer(identities=False)
    assert restarted.render(ident(SECRETS), SECRETS, secret(password=CANARY), first) != first
    assert CANARY.encode() not in b"".join(memo) + b"".join(memo.values())


def test_paths_encrypt_the_named_keys_wherever_they_are(tmp_path: Path) -> None:
    rules = compile_rules(
        [SensitiveType(group="example.io", resource="widgets", paths=["spec.credentials"])]
    )
    doc = {
        "apiVersion": "example.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "demo"},
        "spec": {"size": 3, "credentials": {"token": CANARY}},
    }
    r = renderer(rules=rules)
    assert r.encrypted(WIDGETS)
    assert r.encrypted(SECRETS)
    assert not r.encrypted(CONFIGMAPS)
    data = r.render(ident(WIDGETS, "w"), WIDGETS, doc, None)
    written = yaml.safe_load(data)
    assert written["spec"]["size"] == 3
    assert written["spec"]["credentials"]["token"].startswith("ENC[AES256_GCM,")
    assert written["sops"]["encrypted_regex"] == "^(credentials|annotations|labels)$"
    path = tmp_path / "w.sops.yaml"
    path.write_bytes(data)
    assert yaml.safe_load(run_sops(["decrypt", str(path)], tmp_path, ALICE[0])) == doc


def test_whole_document_encrypts_everything_but_the_header() -> None:
    rules = compile_rules([SensitiveType(resource="configmaps", whole_document=True)])
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "demo"},
        "data": {"k": CANARY},
        "binaryData": {"b": CANARY_B64},
        "immutable": True,
    }
    data = renderer(rules=rules).render(ident(CONFIGMAPS, "c"), CONFIGMAPS, doc, None)
    written = yaml.safe_load(data)
    assert written["metadata"] == doc["metadata"]
    assert written["immutable"].startswith("ENC[AES256_GCM,")
    assert ",type:bool]" in written["immutable"]
    assert CANARY.encode() not in data
    assert CANARY_B64.encode() not in data
    assert written["sops"]["encrypted_regex"] == "^(binaryData|data|immutable|annotations|labels)$"
    clash = {**doc, "name": "top-level field called name"}
    with pytest.raises(RefusedContent) as refused:
        renderer(rules=rules).render(ident(CONFIGMAPS, "c"), CONFIGMAPS, clash, None)
    assert refused.value.reason == ENCRYPTION_FAILED


def test_a_value_sops_cannot_hold_is_refused_naming_only_its_path() -> None:
    doc = secret()
    doc["stringData"] = {"big": 1 << 70}
    with pytest.raises(RefusedContent) as refused:
        renderer().render(ident(SECRETS), SECRETS, doc, None)
    assert refused.value.reason == ENCRYPTION_FAILED
    assert "stringData.big" in refused.value.message
    assert str(1 << 70) not in refused.value.message


# --- re-encryption and .sops.yaml (the worker's Encrypting extension) ----------------------


def test_adding_a_recipient_rotates_the_data_key() -> None:
    old = renderer(ALICE).render(ident(SECRETS), SECRETS, secret(a="1", b=CANARY), None)
    both = renderer(ALICE, BOB)
    assert isinstance(both, Encrypting)
    assert both.recipients_of(old) == frozenset({ALICE[1]})
    new = both.rekey(ident(SECRETS), old)
    assert data_key(new) != data_key(old)
    assert both.recipients_of(new) == frozenset({ALICE[1], BOB[1]})
    assert decrypt_document(new, [BOB[0]]) == secret(a="1", b=CANARY)
    # Stable from then on, also for a restarted operator.
    assert both.render(ident(SECRETS), SECRETS, secret(a="1", b=CANARY), new) == new
    assert renderer(BOB, ALICE).render(ident(SECRETS), SECRETS, secret(a="1", b=CANARY), new) == new
    # A rotation: a third identity joins; the files are still provably the operator's.
    assert renderer(ALICE, BOB, CAROL).rekey(ident(SECRETS), new) != new


def test_removing_a_recipient_rotates_the_data_key() -> None:
    with_bob = SopsRenderer(recipients=[ALICE[1], BOB[1]], identities=[ALICE[0]], clock=Clock())
    old = with_bob.render(ident(SECRETS), SECRETS, secret(a="1"), None)
    new = renderer(ALICE).rekey(ident(SECRETS), old)
    assert enc_values(new)["a"] != enc_values(old)["a"]
    assert data_key(new) != data_key(old)
    assert inspect_document(new).recipients == (ALICE[1],)
    assert decrypt_document(new, [ALICE[0]]) == secret(a="1")


def test_removing_an_identity_re_renders_the_sensitive_streams() -> None:
    # Its data keys cannot be derived any more: the worker cannot prove (and so re-encrypt)
    # the files, and the documents are written afresh from the cluster instead.
    target = TargetKey("demo", "mirror")
    streams = [
        StreamSpec(target, rtype, "demo", (None,), frozenset()) for rtype in (SECRETS, CONFIGMAPS)
    ]
    plan = Plan(streams={s.key: s for s in streams})

    def resolved(*keys: tuple[str, str], identities: int) -> Resolution:
        r = SopsRenderer(
            recipients=[k[1] for k in keys], identities=[k[0] for k in keys[:identities]]
        )
        return Resolution(r, None, True)

    both = resolved(ALICE, BOB, identities=2)
    assert _resyncs(both, resolved(ALICE, BOB, identities=2), plan, target) == set()
    assert _resyncs(resolved(ALICE, identities=1), both, plan, target) == set()  # rekey does it
    assert _resyncs(both, resolved(ALICE, identities=1), plan, target) == {streams[0].key}


def test_without_an_identity_files_are_not_re_encrypted_by_the_worker() -> None:
    old = renderer(ALICE).render(ident(SECRETS), SECRETS, secret(a="1"), None)
    assert renderer(BOB, identities=False).recipients_of(old) is None
    with pytest.raises(RefusedContent) as refused:
        renderer(BOB).rekey(ident(SECRETS), old)  # BOB cannot open ALICE's file
    assert refused.value.reason == "ReencryptFailed"


def test_sops_config_is_written_when_missing_and_rewritten_only_when_ours() -> None:
    r = renderer(ALICE, BOB)
    config = r.sops_config(None)
    assert config is not None
    assert managed_sops_config(config)
    assert r.sops_config(config) == config
    assert r.sops_config(b"creation_rules: []\n") is None  # a person's own file stays
    assert renderer(identities=False).sops_config(None) is not None
    assert unencrypted_renderer().sops_config(None) is None
    assert "AGE-SECRET-KEY" not in config.decode()
    assert repr(r).count("AGE-SECRET-KEY") == 0


@needs_sops
def test_sops_run_by_hand_in_the_folder_follows_the_operator(tmp_path: Path) -> None:
    rules = compile_rules(
        [SensitiveType(group="example.io", resource="widgets", paths=["spec.token"])]
    )
    layout = Layout(per_type={("example.io", "widgets"): "widgets/{name}.yaml"})
    config = renderer(ALICE, BOB, rules=rules, layout=layout).sops_config(None)
    assert config is not None
    (tmp_path / ".sops.yaml").write_bytes(config)
    secret_path = tmp_path / "demo" / "core" / "secrets" / "db.sops.yaml"
    widget_path = tmp_path / "widgets" / "w.sops.yaml"
    for path, doc in (
        (secret_path, secret(password=CANARY)),
        (
            widget_path,
            {"apiVersion": "example.io/v1", "kind": "Widget", "spec": {"token": CANARY, "n": "1"}},
        ),
    ):
        path.parent.mkdir(parents=True)
        path.write_text(yaml.safe_dump(doc))
        run_sops(["encrypt", "--in-place", str(path.relative_to(tmp_path))], tmp_path)
        written = path.read_bytes()
        assert CANARY.encode() not in written
        assert CANARY_B64.encode() not in written
        assert set(inspect_document(written).recipients) == {ALICE[1], BOB[1]}
    assert (
        inspect_document(widget_path.read_bytes()).rule.encrypted_regex
        == "^(token|annotations|labels)$"
    )
    assert yaml.safe_load(widget_path.read_bytes())["spec"]["n"] == "1"


# --- the policy -------------------------------------------------------------------------------


def test_paths_naming_identity_fields_are_refused() -> None:
    for path in ("spec.name", "spec.metadata", "x.namespace", "kind"):
        with pytest.raises(PolicyError, match=r"sensitiveTypes\[0\]\.paths\[0\]"):
            compile_rules([SensitiveType(resource="widgets", paths=[path])])
    with pytest.raises(PolicyError, match="not a dot path"):
        compile_rules([SensitiveType(resource="widgets", paths=["spec..x"])])


def test_secrets_are_always_sensitive_and_can_only_be_widened() -> None:
    assert compile_rules([])[("", "secrets")].keys == ("data", "stringData")
    widened = compile_rules([SensitiveType(resource="secrets", paths=["metadata.annotations.x"])])
    assert widened[("", "secrets")].keys == ("data", "stringData", "x")
    doc = secret(a="1")
    assert (
        widened[("", "secrets")].rule_for(doc).encrypted_regex
        == "^(data|stringData|x|annotations|labels)$"
    )


def test_key_regex_is_literal_in_re2() -> None:
    pattern = compile_re2(key_regex(["tls.crt", "a+b", "plain"]))
    assert pattern.search("tls.crt")
    assert pattern.search("a+b")
    assert pattern.search("plain")
    assert not pattern.search("tlsXcrt")
    assert not pattern.search("aab")


@pytest.mark.parametrize(
    "template",
    ["{namespace}/{group}/{resource}/{name}.yaml", "by-kind/{kind}-{name}.{version}.yaml"],
)
def test_path_regex_matches_the_layout_paths_of_its_type(template: str) -> None:
    layout = Layout(default=template)
    pattern = compile_re2(path_regex(template, "example.io", "widgets"))
    for name in ("w", "w.x", "w-1"):
        path = layout.path_for(ident(WIDGETS, name), WIDGETS, encrypted=True)
        assert pattern.search(path), path
    other = layout.path_for(ident(SECRETS), SECRETS, encrypted=True)
    assert template.startswith("by-kind") or not pattern.search(other)
    assert not pattern.search(layout.path_for(ident(WIDGETS), WIDGETS, encrypted=False))
