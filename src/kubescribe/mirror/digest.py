"""A digest of a document's content, the same on both sides of the admission join.

The admission webhook sees an object before it is stored; the watch sees it after. Both are
sanitized first (server-set metadata, status and runtime fields go), so what is left is what the
writer sent, and equal digests mean the watched object is the admitted one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from kubescribe.mirror.sanitize import sanitize


def content_digest(obj: Mapping[str, Any], *, sanitized: bool = False) -> str:
    doc = obj if sanitized else sanitize(obj)
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
