"""A redis-py client for `RedisOptions`: TLS (`rediss://`) verified against `--redis-ca-file`
(or the system CAs), the password from the environment."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from kubescribe.store.redis_options import RedisOptions


def connect(options: RedisOptions, *, socket_timeout: float) -> aioredis.Redis:
    """A client (connections open lazily); replies decoded as text."""
    extra: dict[str, Any] = {}
    if options.password:
        extra["password"] = options.password
    if options.url.startswith("rediss://") and options.ca_file is not None:
        extra["ssl_ca_certs"] = str(options.ca_file)  # redis-py verifies by default
    return aioredis.Redis.from_url(
        options.url,
        decode_responses=True,
        socket_timeout=socket_timeout,
        socket_connect_timeout=5.0,
        **extra,
    )
