"""Files planted in the repository by a hostile repo writer: each is refused with a reason
naming what is wrong, in bounded time, and never stops the live document from being written."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from kubescribe.api.conditions import REENCRYPT_FAILED
from kubescribe.controller.encryption import SopsRenderer
from kubescribe.git.targets import RefusedContent
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.secrets.age import generate_identity, load_identities, unwrap, wrap, wrap_seeded
from kubescribe.secrets.sops import CryptRule, SopsError, decrypt_document, encrypt_document
from tests.unit.test_sops import needs_sops, run_sops, sops_decrypt

ALICE, ALICE_RECIPIENT = generate_identity()
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SECRETS = ResourceType("", "v1", "secrets", "Secret", True)
DB = Identity("", "Secret", "demo", "db")
LIVE = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "db", "namespace": "demo"},
    "data": {"password": "aHVudGVyMg=="},
}
BOUND = 1.0  # seconds; each case takes milliseconds


def valid(doc: dict[str, object] | None = None, rule: CryptRule | None = None) -> bytes:
    """A well-formed file for the operator's recipient, as anyone can make one."""
    return encrypt_document(
        doc or {"data": {"a": "MQ=="}}, [ALICE_RECIPIENT], rule=rule or CryptRule(), now=NOW
    )


def with_sops(block: str) -> bytes:
    stanza = "  age:\n  - recipient: " + ALICE_RECIPIENT + "\n    enc: x\n"
    return f"data:\n  a: b\nsops:\n{stanza}{block}".encode()


STAMP = "  lastmodified: '2026-01-01T00:00:00Z'\n"


def bomb() -> bytes:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    tail = valid()
    return ("\n".join(lines) + "\n").encode() + tail[tail.index(b"sops:") :]


def small_key() -> bytes:
    text = valid().decode()
    start, end = text.index("enc: |"), text.index("  lastmodified")
    armored = "".join(f"      {line}\n" for line in wrap(b"0" * 16, ALICE_RECIPIENT).splitlines())
    return (text[:start] + "enc: |\n" + armored + text[end:]).encode()


CASES: dict[str, tuple[Callable[[], bytes], str | None]] = {
    "not yaml": (lambda: b"\x00\xff" * 1000, "invalid YAML"),
    "several documents": (lambda: b"a: 1\n---\nb: 2\n", "exactly one YAML document"),
    "sops is a scalar": (lambda: b"sops: 5\n", "metadata block is missing"),
    "age is a string": (lambda: b"sops:\n  age: nope\n", "sops.age must be a list"),
    "enc is a number": (lambda: with_sops("").replace(b"enc: x", b"enc: 5"), "enc strings"),
    "lastmodified a number": (lambda: with_sops("  lastmodified: 5\n  mac: x\n"), "RFC 3339"),
    "mac a list": (lambda: with_sops(STAMP + "  mac: [1]\n"), "sops.mac is missing"),
    "threshold a string": (
        lambda: with_sops(STAMP + "  mac: x\n  shamir_threshold: x\n"),
        "shamir_threshold must be an integer",
    ),
    "key groups of numbers": (lambda: b"sops:\n  key_groups: [1, 2]\n", "list of maps"),
    "regex a number": (
        lambda: with_sops(STAMP + "  mac: x\n  encrypted_regex: 7\n"),
        "must be strings",
    ),
    "regex Go rejects": (
        lambda: with_sops(STAMP + "  mac: x\n  encrypted_regex: '(?=x)'\n"),
        "is not RE2",
    ),
    "two rules": (
        lambda: with_sops(STAMP + "  mac: x\n  encrypted_regex: a\n  encrypted_suffix: b\n"),
        "exactly one crypt rule",
    ),
    "garbage age stanza": (
        lambda: with_sops(STAMP + "  mac: x\n"),
        "none of the identities opens",
    ),
    "data key of 16 bytes": (small_key, "wrong size"),
    "one-byte IV": (
        lambda: re.sub(rb"iv:[^,]*,", b"iv:QQ==,", valid(), count=1),
        "should be encrypted but is not",
    ),
    "alias bomb": (bomb, "aliases are not supported"),
    "deep nesting": (lambda: b"a:\n" + b"- " * 900 + b"x\nsops: {}\n", "nested deeper"),
    "huge file": (lambda: b"a: " + b"x" * (9 << 20) + b"\n", "larger than 8 MiB"),
    "hostile regex": (
        lambda: valid({"data": {"a" * 100_000 + "!": "x"}}, CryptRule(encrypted_regex="^(a+)+$")),
        None,  # a valid file: read in linear time
    ),
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("case", list(CASES))
def test_a_planted_file_is_refused_in_bounded_time(case: str) -> None:
    make, reason = CASES[case]
    planted = make()
    renderer = SopsRenderer(recipients=[ALICE_RECIPIENT], identities=[ALICE])

    started = time.perf_counter()
    renderer.recipients_of(planted)
    written = renderer.render(DB, SECRETS, LIVE, planted)  # the live Secret is still written
    if reason is None:
        decrypt_document(planted, [ALICE])
        with pytest.raises(RefusedContent, match="not the operator's"):
            renderer.rekey(DB, planted)  # it opens, but the operator did not write it
    else:
        with pytest.raises(SopsError, match=reason):
            decrypt_document(planted, [ALICE])
        with pytest.raises(RefusedContent, match=reason) as refused:
            renderer.rekey(DB, planted)
        assert refused.value.reason == REENCRYPT_FAILED
    assert time.perf_counter() - started < BOUND
    assert written != planted
    assert decrypt_document(written, [ALICE]) == LIVE


BOB, BOB_RECIPIENT = generate_identity()


def swap_stanza(data: bytes, recipient: str, enc: str) -> bytes:
    """`data` with `recipient`'s age stanza replaced (the MAC does not cover `sops.age`)."""
    tree = yaml.safe_load(data)
    for stanza in tree["sops"]["age"]:
        if stanza["recipient"] == recipient:
            stanza["enc"] = enc
    return yaml.safe_dump(tree, sort_keys=False).encode()


@needs_sops
@pytest.mark.parametrize("swap", ["a stanza of another key", "the operator's own stanza"])
@pytest.mark.parametrize("change", [False, True])
def test_a_swapped_stanza_is_replaced_on_the_next_write(
    swap: str, change: bool, tmp_path: Path
) -> None:
    renderer = SopsRenderer(recipients=[ALICE_RECIPIENT, BOB_RECIPIENT], identities=[ALICE])
    written = renderer.render(DB, SECRETS, LIVE, None)
    assert yaml.safe_load(sops_decrypt(written, BOB, tmp_path)) == LIVE
    stanzas = {s["recipient"]: s["enc"] for s in yaml.safe_load(written)["sops"]["age"]}
    enc = wrap(os.urandom(32), BOB_RECIPIENT) if swap.startswith("a") else stanzas[ALICE_RECIPIENT]
    planted = swap_stanza(written, BOB_RECIPIENT, enc)
    assert decrypt_document(planted, [ALICE]) == LIVE  # still opens for the operator...
    (tmp_path / "in.sops.yaml").write_bytes(planted)
    failed = run_sops(["decrypt", str(tmp_path / "in.sops.yaml")], tmp_path, BOB)
    assert failed.returncode != 0  # ...but locks Bob out

    live = {**LIVE, "data": {"password": "bmV3"}} if change else LIVE
    rewritten = renderer.render(DB, SECRETS, live, planted)
    assert rewritten != planted
    assert yaml.safe_load(sops_decrypt(rewritten, BOB, tmp_path)) == live
    assert decrypt_document(rewritten, [ALICE]) == live
    assert renderer.render(DB, SECRETS, live, rewritten) == rewritten  # stable from then on


def test_stanzas_are_the_same_bytes_for_the_same_data_key() -> None:
    key = os.urandom(32)
    one = wrap_seeded(key, BOB_RECIPIENT)
    assert one == wrap_seeded(key, BOB_RECIPIENT)
    assert one != wrap_seeded(key, ALICE_RECIPIENT)
    assert one != wrap_seeded(os.urandom(32), BOB_RECIPIENT)
    assert unwrap(one, load_identities([BOB])) == key
    assert unwrap(one, load_identities([ALICE])) is None
