"""Redis settings: entry signatures, and the operator refuses Redis without a signing key."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kubescribe import cli
from kubescribe.store.redis_options import HMAC_KEY_ENV, EntrySigner, RedisOptions

KEY = b"k" * 32


def test_a_signature_binds_the_entry_to_its_name() -> None:
    signer = EntrySigner(KEY)
    mac = signer.sign("kubescribe:facts:local", "payload")
    assert signer.verify("kubescribe:facts:local", "payload", mac)
    assert not signer.verify("kubescribe:facts:other", "payload", mac)
    assert not signer.verify("kubescribe:facts:local", "payload!", mac)
    assert not EntrySigner(b"x" * 32).verify("kubescribe:facts:local", "payload", mac)
    assert not signer.verify("kubescribe:facts:local", "payload", "é" * 64)


def test_short_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        EntrySigner(b"short")


def test_option_problems(tmp_path: Path) -> None:
    assert RedisOptions("redis://r:6379/0", KEY).problems() == []
    odd = RedisOptions("http://r", b"short", ca_file=tmp_path, key_prefix="")
    problems = " | ".join(odd.problems())
    assert "redis:// or rediss://" in problems
    assert HMAC_KEY_ENV in problems
    assert "--redis-ca-file needs a rediss:// URL" in problems
    assert "--redis-key-prefix must not be empty" in problems


@pytest.mark.parametrize("key", [None, "", "too-short"])
def test_the_operator_refuses_redis_without_a_signing_key(key: str | None) -> None:
    result = CliRunner().invoke(
        cli.main,
        ["run", "--redis-url=redis://127.0.0.1:1/0"],
        env={HMAC_KEY_ENV: key, "KUBESCRIBE_REDIS_URL": None},
    )
    assert result.exit_code == 2
    assert f"Redis needs ${HMAC_KEY_ENV}" in result.output


def test_the_url_may_come_from_the_environment() -> None:
    result = CliRunner().invoke(
        cli.main, ["run"], env={HMAC_KEY_ENV: None, "KUBESCRIBE_REDIS_URL": "redis://r:1/0"}
    )
    assert result.exit_code == 2
    assert f"Redis needs ${HMAC_KEY_ENV}" in result.output
