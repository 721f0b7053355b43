"""Patterns and formats on RE2: linear time whatever the string or the pattern.

fastjsonschema compiles ``pattern`` and ``patternProperties`` with Python ``re`` (backtracking)
and checks formats with it too; here every pattern is an RE2 ``Pattern`` (refused at
registration when RE2 cannot compile it: backreferences, look-arounds) and every format an RE2
match or a plain linear check.
"""

from __future__ import annotations

from collections.abc import Callable

import re2  # type: ignore[import-untyped]
from fastjsonschema.draft04 import CodeGeneratorDraft04
from fastjsonschema.draft2019 import CodeGeneratorDraft2019

from reach.core.schema_bounds import MAX_PATTERN_WORK, MAX_REGEX_FORMAT_CHARS, Overrun, SchemaError

__all__ = ["FORMATS", "RE2_OPTIONS", "Pattern", "formats_for", "re2_options", "translate"]


# --- regexes --------------------------------------------------------------------------------


def re2_options(max_mem: int = 8 << 20) -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.never_capture = True  # a yes/no answer needs no groups, and groups cost NFA time
    options.max_mem = max_mem
    return options


RE2_OPTIONS = re2_options()


def translate(pattern: str) -> str:
    r"""ECMA-262/Python spellings RE2 lacks: ``\uXXXX`` as ``\x{XXXX}``, ``\Z`` as ``\z``."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = pattern[i + 1]
        hexdigits = pattern[i + 2:i + 6]
        if nxt == "u" and len(hexdigits) == 4 and all(h in _HEX for h in hexdigits):
            out.append("\\x{" + hexdigits + "}")
            i += 6
        else:
            out.append("\\z" if nxt == "Z" else "\\" + nxt)
            i += 2
    return "".join(out)


_HEX = frozenset("0123456789abcdefABCDEF")


class Pattern:
    """An RE2 regex with the ``search`` the generated code calls, refusing strings so long
    that even RE2's linear worst case (when its DFA gives up) would stall the loop."""

    __slots__ = ("pattern", "regex", "max_chars")

    def __init__(self, pattern: str) -> None:
        if not isinstance(pattern, str):
            raise SchemaError(f"pattern must be a string, not {pattern!r}")
        try:
            self.regex = re2.compile(translate(pattern), RE2_OPTIONS)
        except re2.error as exc:
            reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
            raise SchemaError(
                f"pattern {pattern!r} is not supported: {reason}; patterns use RE2 syntax "
                f"(linear time: no backreferences or look-arounds)") from None
        self.pattern = pattern
        self.max_chars = MAX_PATTERN_WORK // max(1, self.regex.programsize)

    def search(self, text: str) -> bool:
        if len(text) > self.max_chars:
            raise Overrun(f"a {len(text)}-character string is too long to check against "
                           f"pattern {self.pattern!r} (at most {self.max_chars})")
        return self.regex.search(text) is not None


# --- formats --------------------------------------------------------------------------------
# fastjsonschema checks formats with Python ``re``; "email" and "idn-email" are quadratic and
# "json-pointer" super-linear on hostile strings, and "regex" compiles the data with Python
# ``re``. Every format it knows is replaced here by an RE2 match or a plain linear check.


def _from_fastjsonschema(regex: str) -> Callable[[str], bool]:
    assert regex.startswith("^") and regex.endswith("\\Z"), regex
    body = regex[1:-2].replace("{,", "{0,")  # RE2 reads "{,n}" as literal text
    compiled = re2.compile(body, RE2_OPTIONS)
    return lambda value: compiled.fullmatch(value) is not None


def _email(value: str) -> bool:
    local, at, domain = value.partition("@")
    return (bool(at) and bool(local) and "@" not in domain and local[0] != "."
            and local[-1] != "." and ".." not in local and "." in domain[1:-1])


def _idn_email(value: str) -> bool:
    local, at, domain = value.partition("@")
    return bool(at) and bool(local) and "@" not in domain and "." in domain[1:-1]


_IDN_HOSTNAME = re2.compile(
    r"(?:xn--)?[a-zA-Z0-9][a-zA-Z0-9_-]{0,61}[a-zA-Z0-9]?\."
    r"(?:xn--(?:[a-zA-Z0-9-]{1,50}|[a-zA-Z0-9-]{1,30}\.[a-zA-Z]{2,})"
    r"|[a-zA-Z0-9][a-zA-Z0-9-]{0,49}|[a-zA-Z0-9][a-zA-Z0-9-]{0,29}\.[a-zA-Z]{2,})",
    RE2_OPTIONS)
_DURATION = re2.compile(
    r"P(?:[0-9]+W|(?:[0-9]+Y)?(?:[0-9]+M)?(?:[0-9]+D)?"
    r"(?:T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?)", RE2_OPTIONS)
_REGEX_FORMAT_OPTIONS = re2_options(max_mem=256 << 10)


def _regex(value: str) -> bool:
    if len(value) > MAX_REGEX_FORMAT_CHARS:
        return False
    try:
        re2.compile(translate(value), _REGEX_FORMAT_OPTIONS)
    except re2.error:
        return False
    return True


_HANDWRITTEN: dict[str, Callable[[str], bool]] = {
    "email": _email,
    "idn-email": _idn_email,
    "idn-hostname": lambda v: _IDN_HOSTNAME.fullmatch(v) is not None,
    "duration": lambda v: v != "P" and _DURATION.fullmatch(v) is not None,
    "regex": _regex,
}
FORMATS: dict[str, Callable[[str], bool]] = {
    **{name: _from_fastjsonschema(rx) for name, rx in CodeGeneratorDraft2019.FORMAT_REGEXS.items()
       if name not in _HANDWRITTEN},
    **_HANDWRITTEN,
}


def formats_for(cls: type[CodeGeneratorDraft04]) -> dict[str, Callable[[str], bool]]:
    """Only the formats this draft checks, so a draft-04 schema ignores "uuid" as before."""
    return {k: v for k, v in FORMATS.items() if k in cls.FORMAT_REGEXS or k == "regex"}
