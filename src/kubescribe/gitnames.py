"""Path segments Git will not store: `.git` and the names a file system may read as `.git`,
`.gitmodules` or `.gitattributes`.

libgit2 refuses a tree entry named `.git` (any case, NTFS aliases such as `git~1`, `.git.`,
`.git::$INDEX_ALLOCATION`), and `git fsck` on a receiving server (`transfer.fsckObjects`, as
hosted forges run it) also refuses HFS+ spellings with ignorable code points (`.g\\u200cit`)
and a directory named like `.gitmodules` or `.gitattributes`. The rules are git's
(`is_hfs_dotgit`, `is_ntfs_dotgit`, `is_ntfs_dot_generic`) as one regular expression, written
out for the CRD's CEL rules (RE2) and for the operator (Python `re`). Backslashes count as
separators, as git's NTFS checks read them.
"""

from __future__ import annotations

import re

# Code points HFS+ ignores when it compares names (git's `next_hfs_char`). The CRD's RE2 rule
# ignores every format character (`\p{Cf}`), a superset, to stay within the CEL cost budget.
_HFS_IGNORED = "[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]"
_FORMAT_CHARACTERS = r"\p{Cf}"
# NTFS 8.3 short-name prefixes of `.gitmodules` and `.gitattributes` (git's `is_ntfs_dot_*`).
_SHORT_PREFIXES = ("gi7eba", "gi7d29")


def _pattern(ignored: str) -> str:
    def hfs(word: str) -> str:
        return "".join(re.escape(c) + ignored + "*" for c in word)

    names = [
        # `.git`, `.gitmodules`, `.gitattributes`, with code points HFS+ ignores anywhere
        f"{ignored}*{hfs('.git')}({hfs('modules')}|{hfs('attributes')})?",
        r"git~1|gitmod~[1-4]|gitatt~[1-4]",  # NTFS short names
    ]
    for k in range(7):  # 8.3 fallback names: k characters of a prefix, `~`, digits; 8 in all
        prefixes = sorted({p[:k] for p in _SHORT_PREFIXES})
        head = prefixes[0] if len(prefixes) == 1 else f"({'|'.join(prefixes)})"
        names.append(f"{head}~[1-9]" + {6: "", 5: r"\d"}.get(k, rf"\d{{{6 - k}}}"))
    # NTFS also drops trailing dots and spaces, and reads `name:stream` as `name`.
    return rf"(?i)(^|[/\\])({'|'.join(names)})[. ]*(:.*)?([/\\]|$)"


RESERVED_PATTERN = _pattern(_FORMAT_CHARACTERS)
"""RE2 syntax (CEL `matches`): matches a path with a reserved segment anywhere."""
_RESERVED = re.compile(_pattern(_HFS_IGNORED))


def has_reserved_segment(path: str) -> bool:
    """Whether a segment of `path` (split at `/` and `\\`) is one Git refuses to store."""
    return _RESERVED.search(path) is not None


def escape_segment(segment: str) -> str:
    """`segment` (one path segment) made storable: each reserved part gets a `_` prefix."""
    return "\\".join(f"_{p}" if has_reserved_segment(p) else p for p in segment.split("\\"))
