"""Names and paths handed to pygit2 lookups, one string object per distinct name.

pygit2 (1.21 and earlier) keeps a reference to the string given to a lookup by name or path
(`Tree[path]`, `path in tree`, `TreeBuilder.get`, `references.get`/`delete`, `ref in
references`, `Repository(path)`): its helper that borrows the string never releases it. A
writer passes the same few names over and over, but as fresh string objects (`partition`,
f-strings), so each call would leak one string, about 1 KB per mirrored change. Interned, the
leak is one string per distinct name, which a long run does not grow.
"""

from __future__ import annotations

import sys


def lookup_name(text: str) -> str:
    """The one shared copy of `text`, to pass to a pygit2 lookup."""
    return sys.intern(text)
