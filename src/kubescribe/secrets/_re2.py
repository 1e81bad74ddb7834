"""Regular expressions with Go RE2 meaning, run by RE2 itself (google-re2).

sops evaluates its crypt-rule regexes with Go's `regexp` (RE2 syntax, unanchored search), and
they are read from files in Git, which a repo writer controls. RE2 matches in time linear in
the text and bounded memory, whatever the pattern (``^(a+)+$`` is harmless), and rejects what
Go rejects (lookaround, backreferences, possessive quantifiers, counts above 1000, ...). The
C++ library also accepts ``\\C`` (any byte), which Go does not: it is refused, so that a rule
means the same once a person runs `sops`. Overlong patterns are refused as well.
"""

import functools

import re2

MAX_PATTERN = 4096  # characters; sops rules are short

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # errors are raised, never written to stderr
_OPTIONS.max_mem = 1 << 20  # 1 MiB of compiled program at most


class Re2Error(ValueError):
    """The pattern is not valid RE2, or Go would read it differently."""


class Regex:
    """A compiled pattern; `search` is Go's unanchored `regexp.MatchString`."""

    def __init__(self, compiled: "re2._Regexp[bytes]") -> None:
        self._compiled = compiled

    def search(self, text: str) -> bool:
        # Bytes, so that text no UTF-8 encoder accepts (a lone surrogate) cannot raise.
        return self._compiled.search(text.encode("utf-8", "surrogatepass")) is not None


def _go_rejects_any_byte(pattern: str) -> bool:
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\":
            if pattern[i + 1 : i + 2] == "C":
                return True
            i += 1
        i += 1
    return False


@functools.lru_cache(maxsize=128)
def compile_re2(pattern: str) -> Regex:
    """Compile an RE2 pattern; raises `Re2Error` (the message quotes at most 64 characters)."""
    shown = repr(pattern[:64]) + ("..." if len(pattern) > 64 else "")
    if len(pattern) > MAX_PATTERN:
        raise Re2Error(f"regex {shown} is longer than {MAX_PATTERN} characters")
    if _go_rejects_any_byte(pattern):
        raise Re2Error(f"regex {shown} uses \\C, which Go's RE2 (used by sops) rejects")
    try:
        compiled = re2.compile(pattern.encode("utf-8", "surrogatepass"), _OPTIONS)
    except re2.error as err:
        raw = err.args[0] if err.args else b"invalid"
        detail = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        raise Re2Error(f"regex {shown} is not RE2 (used by sops): {detail[:80]}") from None
    return Regex(compiled)
