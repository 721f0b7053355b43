"""What a peer may send, as numbers and character classes: every frame field is built from these.

Everything a peer sends is bounded before it reaches the core: JSON nesting (at most
``MAX_DEPTH`` levels), every number (finite, in a stated range), every list (a maximum count)
and every string (a maximum length and a character class):

    name   identifiers (agent, caller, capability, tags, ids, keys, version, action): no
           control characters (C0, DEL, C1), bidi controls, line/paragraph separators or
           invisible format characters (zero-width, soft hyphen, BOM, tag characters)
    label  one-line free text (intents): printable Unicode, zero-width joiners allowed
    text   multi-line free text (description, intent): a label that may also hold \\n and \\t

Error messages from peers are free text too, but they carry a task's outcome, so they are
cleaned (``\\uXXXX`` escapes) and shortened rather than refused.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

VERSION = 1
SUPPORTED_VERSIONS = frozenset({VERSION})
FRAME_TYPES = frozenset(
    ("register", "heartbeat", "ack", "result", "error", "chunk", "deregister", "welcome",
     "invoke", "cancel", "hello", "submit", "status", "accepted", "task", "admin", "command",
     "probe", "probe_result")
)
"""Every frame type a peer may send or receive on an agent or caller session."""

# ---------------------------------------------------------------- bounds

MAX_DEPTH = 200  # pydantic-core's JSON parser refuses deeper nesting; we say so plainly
MAX_ID = 2**53 - 1  # request ids and chunk seqs: integers every JSON peer represents exactly
MAX_COUNT = 10_000_000  # heartbeat inflight / queue_depth
MAX_ATTEMPT = 1_000_000
MAX_LOAD = 1000.0  # 0–1 is the documented scale; above 1 means overloaded, tolerated
MAX_TIMEOUT = 31_536_000.0  # one year, in seconds
MAX_LATENCY_MS = 1e9  # about 11.6 days
MAX_CAPABILITIES = 10_000  # hard protocol bound; the coordinator's configured cap is lower
MAX_MESSAGE = 10_000  # error messages longer than this are shortened

# Character classes, as (first, last) code point ranges. Bidi controls reorder what a log
# line or a terminal shows ("Trojan Source"); separators and C0/C1 forge log lines and carry
# raw ESC sequences into terminals and Prometheus text; invisible characters make two names
# that look alike differ.
_C0_C1 = ((0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F))  # all but \t and \n
_TAB_LF = ((0x09, 0x0A),)
_BIDI = ((0x061C, 0x061C), (0x200E, 0x200F), (0x202A, 0x202E), (0x2066, 0x2069))
_SEPARATORS = ((0x2028, 0x2029),)
_INVISIBLE = ((0x00AD, 0x00AD), (0x180E, 0x180E), (0x200B, 0x200D), (0x2060, 0x2064),
              (0x206A, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0xE0000, 0xE007F))
_TEXT_BAD = _C0_C1 + _BIDI + _SEPARATORS
_LABEL_BAD = _TEXT_BAD + _TAB_LF
_NAME_BAD = _LABEL_BAD + _INVISIBLE
# Public: the classes names and free text must stay out of, for schemas written elsewhere
# (the REST front door's OpenAPI document needs them in a syntax Python's re can read).
NAME_BAD, TEXT_BAD = _NAME_BAD, _TEXT_BAD


def _rust_pattern(bad: tuple[tuple[int, int], ...]) -> str:
    # pydantic-core checks `pattern` with Rust's regex crate: no Python call per field.
    ranges = "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in bad)
    return f"^[^{ranges}]*$"


def _py_class(bad: tuple[tuple[int, int], ...]) -> re.Pattern[str]:
    return re.compile("[" + "".join(f"\\U{a:08X}-\\U{b:08X}" for a, b in bad) + "]")


_NAME = _rust_pattern(_NAME_BAD)
_LABEL = _rust_pattern(_LABEL_BAD)
_TEXT = _rust_pattern(_TEXT_BAD)
_TRACEPARENT = r"^ *[0-9A-Fa-f]{2}-[0-9A-Fa-f]{32}-[0-9A-Fa-f]{16}-[0-9A-Fa-f]{2} *$"
# What a pattern mismatch means, for `_explain`: the rule, and how to find the culprit.
RULES: dict[str, tuple[str, re.Pattern[str] | None]] = {
    _NAME: ("must not contain control characters, bidi controls, line separators or "
            "invisible characters", _py_class(_NAME_BAD)),
    _LABEL: ("must not contain control characters (not even \\n or \\t), bidi controls or "
             "line separators", _py_class(_LABEL_BAD)),
    _TEXT: ("must not contain control characters other than \\n and \\t, bidi controls or "
            "line separators", _py_class(_TEXT_BAD)),
    _TRACEPARENT: ("must be a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>", None),
}
_TEXT_CLEAN = _py_class(_TEXT_BAD)


def clean_message(value: str) -> str:
    value = _TEXT_CLEAN.sub(lambda m: f"\\u{ord(m.group()):04x}", value)
    return value if len(value) <= MAX_MESSAGE else value[:MAX_MESSAGE - 1] + "…"


Name = Annotated[str, Field(pattern=_NAME)]
"""An identifier: printable, one line, nothing invisible. Lengths are set per field."""
Label = Annotated[str, Field(pattern=_LABEL)]
Text = Annotated[str, Field(pattern=_TEXT)]
TraceParent = Annotated[str, Field(max_length=200, pattern=_TRACEPARENT)]
Tag = Annotated[str, Field(min_length=1, max_length=100, pattern=_NAME)]
Intent = Annotated[str, Field(min_length=1, max_length=500, pattern=_LABEL)]
Token = Annotated[str, Field(max_length=4096)]
RequestId = Annotated[int, Field(ge=-MAX_ID, le=MAX_ID)]
Attempt = Annotated[int, Field(ge=0, le=MAX_ATTEMPT)]
TaskId = Annotated[str, Field(max_length=200, pattern=_NAME)]
