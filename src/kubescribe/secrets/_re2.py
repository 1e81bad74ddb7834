"""Regular expressions with Go RE2 meaning, run by Python's `re`.

sops evaluates its crypt-rule regexes with Go's `regexp` (RE2 syntax, unanchored search).
Python accepts constructs RE2 rejects (lookaround, backreferences, possessive quantifiers,
atomic groups, ...); a rule using them would behave differently, or not at all, once a human
runs `sops`, so they are refused. Go's ``$`` (without ``m``) and ``\\z`` mean "end of text",
which Python spells ``\\Z``; the translation takes care of that.
"""

import functools
import re
import warnings

_MAX_REPEAT = 1000  # RE2 refuses larger repetition counts

_GROUP_REJECTS = (
    ("?=", "lookahead"),
    ("?!", "lookahead"),
    ("?<=", "lookbehind"),
    ("?<!", "lookbehind"),
    ("?>", "atomic groups"),
    ("?(", "conditional groups"),
    ("?P=", "backreferences"),
    ("?#", "comment groups"),
)
_FLAGS = re.compile(r"\?([A-Za-z-]*)[:)]")
_REPEAT = re.compile(r"\{([0-9]+)(?:,([0-9]*))?\}")
_ESCAPE_REJECTS = {
    **dict.fromkeys("123456789", "backreferences"),
    "Z": r"\Z (RE2 spells end of text \z)",
    "N": r"\N{...} escapes",
    "u": r"\u escapes (RE2 uses \x{...})",
    "U": r"\U escapes (RE2 uses \x{...})",
}
_CLASS_ESCAPE_REJECTS = {**_ESCAPE_REJECTS, **dict.fromkeys("bBAz", "assertions in a class")}


class Re2Error(ValueError):
    """The pattern is not valid RE2, or RE2 would read it differently."""


def _reject(pattern: str, what: str) -> Re2Error:
    return Re2Error(f"regex {pattern!r} uses {what}, which Go's RE2 (used by sops) rejects")


def _check_group(pattern: str, i: int) -> None:
    rest = pattern[i + 1 :]
    for prefix, what in _GROUP_REJECTS:
        if rest.startswith(prefix):
            raise _reject(pattern, what)
    flags = _FLAGS.match(rest)
    if flags and set(flags.group(1)) - set("ims-"):
        raise _reject(pattern, f"the inline flags {flags.group(1)!r} (only i, m, s are portable)")


def _escape(pattern: str, i: int, rejects: dict[str, str]) -> tuple[int, str]:
    nxt = pattern[i + 1 : i + 2]
    if nxt in rejects:
        raise _reject(pattern, rejects[nxt])
    if nxt == "z" and rejects is _ESCAPE_REJECTS:
        return i + 2, r"\Z"
    return i + 2, pattern[i : i + 2]


def _char_class(pattern: str, i: int) -> tuple[int, str]:
    out = ["["]
    i += 1
    if pattern[i : i + 1] == "^":
        out.append("^")
        i += 1
    if pattern[i : i + 1] == "]":
        out.append(r"\]")
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        c = pattern[i]
        if c == "\\":
            i, piece = _escape(pattern, i, _CLASS_ESCAPE_REJECTS)
            out.append(piece)
            continue
        if c == "[":
            if pattern[i + 1 : i + 2] in (":", "=", "."):
                raise _reject(pattern, "POSIX bracket classes (not portable to Python)")
            c = r"\["
        out.append(c)
        i += 1
    out.append(pattern[i : i + 1])
    return i + 1, "".join(out)


def _quantifier(pattern: str, i: int) -> tuple[int, str] | None:
    if pattern[i] in "*+?":
        end, text = i + 1, pattern[i]
    else:
        rep = _REPEAT.match(pattern, i)
        if rep is None:
            return None
        counts = [int(n) for n in rep.groups() if n]
        if any(n > _MAX_REPEAT for n in counts):
            raise _reject(pattern, f"a repetition count above {_MAX_REPEAT}")
        end, text = rep.end(), rep.group(0)
    if pattern[end : end + 1] == "+":
        raise _reject(pattern, "possessive quantifiers")
    if pattern[end : end + 1] == "?":
        return end + 1, text + "?"
    return end, text


def translate(pattern: str) -> str:
    """Python spelling of an RE2 pattern; raises `Re2Error` for non-RE2 constructs."""
    multiline = re.search(r"\(\?[A-Za-z-]*m", pattern) is not None
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i, piece = _escape(pattern, i, _ESCAPE_REJECTS)
        elif c == "[":
            i, piece = _char_class(pattern, i)
        elif c == "$" and not multiline:
            i, piece = i + 1, r"\Z"
        elif (quant := _quantifier(pattern, i)) is not None:
            i, piece = quant
        else:
            if c == "(":
                _check_group(pattern, i)
            i, piece = i + 1, c
        out.append(piece)
    return "".join(out)


@functools.lru_cache(maxsize=128)
def compile_re2(pattern: str) -> re.Pattern[str]:
    """Compile an RE2 pattern for `search` (Go's `regexp.Match` is unanchored)."""
    translated = translate(pattern)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return re.compile(translated, re.ASCII)
    except (re.error, FutureWarning) as err:
        raise Re2Error(f"regex {pattern!r} is not supported: {err}") from None
