"""How the operator reaches Redis, and how it tells its own entries from anyone else's.

Redis is shared state, not a trusted party: whoever can write to it could name any author
(a fact with source `audit`) or move a stream's resume cursor. Every fact and cursor the
replicas write is therefore signed with an HMAC key only they hold (`EntrySigner`); entries
without a valid signature are ignored and counted. The signature covers the key (or stream)
name the entry lives under, so a signed entry cannot be moved to another route, stream or
install (key prefix) either. Replaying a signed entry under its own name is possible and
gives back what the operator itself wrote there.

Secrets (the password, the HMAC key) come from the environment, never from Pod arguments.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from pathlib import Path

MIN_KEY_BYTES = 32
HMAC_KEY_ENV = "KUBESCRIBE_REDIS_HMAC_KEY"
PASSWORD_ENV = "REDIS_PASSWORD"
URL_ENV = "KUBESCRIBE_REDIS_URL"
DEFAULT_KEY_PREFIX = "kubescribe:"


class EntrySigner:
    """HMAC-SHA256 over an entry's canonical bytes and the name it is stored under."""

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"the Redis HMAC key must be at least {MIN_KEY_BYTES} bytes")
        self._key = key

    def sign(self, name: str, payload: str) -> str:
        message = name.encode() + b"\x00" + payload.encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def verify(self, name: str, payload: str, signature: str) -> bool:
        return hmac.compare_digest(self.sign(name, payload).encode(), signature.encode())


@dataclass(frozen=True)
class RedisOptions:
    """`--redis-url`, `--redis-ca-file`, `--redis-key-prefix` and the two secrets from the
    environment (`REDIS_PASSWORD`, `KUBESCRIBE_REDIS_HMAC_KEY`)."""

    url: str
    hmac_key: bytes = field(default=b"", repr=False)
    password: str = field(default="", repr=False)
    ca_file: Path | None = None
    key_prefix: str = DEFAULT_KEY_PREFIX

    def problems(self) -> list[str]:
        found = []
        if not self.url.startswith(("redis://", "rediss://")):
            found.append("--redis-url must be a redis:// or rediss:// URL")
        if len(self.hmac_key) < MIN_KEY_BYTES:
            found.append(
                f"Redis needs ${HMAC_KEY_ENV}: a secret of at least {MIN_KEY_BYTES} bytes shared "
                "by the replicas, which signs every fact and cursor (without it anyone who "
                "reaches Redis could name commit authors and move resume cursors)"
            )
        if self.ca_file is not None and not self.url.startswith("rediss://"):
            found.append("--redis-ca-file needs a rediss:// URL (TLS)")
        if not self.key_prefix:
            found.append("--redis-key-prefix must not be empty")
        return found

    def signer(self) -> EntrySigner:
        return EntrySigner(self.hmac_key)
