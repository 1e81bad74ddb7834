"""Data keys the operator can prove it made itself.

A sops file names its own data key (wrapped for each recipient), and anyone who can push to
the repository can write a file. Reusing the data key of the file in Git would let a repo
writer pick the key the operator encrypts live values under. So the operator derives each
document's data key (HKDF-SHA256) from material only it holds, one of its age identities,
bound to the document's identity and to the full set of recipients. The same inputs give the
same key after a restart (stable files); any recipient change gives another key, so a former
recipient who kept a key, or a replayed old file, never opens new values. Keys are derived
per identity, so that adding an identity (key rotation) leaves the files of the others
provably the operator's.
"""

import json
from collections.abc import Iterable

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from kubescribe.secrets import age

DATA_KEY_SIZE = 32
_SALT = b"kubescribe sops data key v1"


def derive_data_key(identity: str, scope: str, recipients: Iterable[str]) -> bytes:
    """The data key of the document named ``scope`` for ``recipients`` (order ignored).

    Raises ValueError for an invalid identity (the message holds no key material).
    """
    [key] = age.load_identities([identity])
    info = json.dumps([scope, sorted(set(recipients))], separators=(",", ":")).encode()
    hkdf = HKDF(algorithm=hashes.SHA256(), length=DATA_KEY_SIZE, salt=_SALT, info=info)
    return hkdf.derive(str(key).encode())
