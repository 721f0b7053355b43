"""Numbers JSON cannot carry: NaN, Infinity, and literals past a double's range (``1e400``).

A frame's typed number fields refuse them (``allow_inf_nan=False``), but pydantic-core's
parser reads ``1e400`` as ``inf``, and a free payload (``params``, a ``result``, a chunk's
``data``, an error's ``details``, a command's ``args``, a fallback's value) takes ``NaN`` and
``Infinity`` as they come. Encoded again they turn into ``null``: a number the caller sent
reached the agent as ``null``, after passing the capability's schema as a number. This
finds them in a decoded payload, so the door refuses the frame or body instead.

Such a number can only be written as ``NaN``, ``Infinity`` or a literal with a three-digit
exponent or over 308 digits, so one regular-expression search of the frame's text says whether
the payload needs looking into; only then is it walked (its containers: a string or a number
costs nothing), on the fields that can hold a free value. The path to the culprit is worked
out on the error path alone.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from reach.errors import ProtocolError

__all__ = ["RULE", "check_frame", "check_parsed", "finite", "loads_finite", "may_hold_nonfinite",
           "nonfinite_path", "refusal"]

# The frames a peer sends with a free payload (the typed fields are checked by their models).
_LOOKED_INTO = frozenset(("submit", "forward", "result", "chunk", "error", "command",
                          "register"))
# What every NaN, infinite or out-of-range number in JSON text contains: the two literals, a
# digit then an exponent of three digits or more that ends the number (1e400, 1E+0308: a JSON
# number ends at a comma, bracket, brace, space or the end; inside a hex id such as "3e412f"
# the exponent-like part runs on), or a run of over 308 digits. Text without any is finite
# throughout; text with one (a string saying "NaN", 1e100) is walked.
_SUSPECT = r"NaN|Infinity|[0-9][eE]\+?0*[1-9][0-9]{2,}(?![^,\]}\s])|[0-9]{309}"
_SUSPECT_TEXT = re.compile(_SUSPECT)
_SUSPECT_BYTES = re.compile(_SUSPECT.encode())
RULE = ("a number is NaN, Infinity or out of a double's range (such as 1e400), which JSON "
        "cannot carry (it would arrive as null); send a finite number, or the value as a string")


def finite(value: Any) -> bool:
    """Whether a decoded JSON value holds only finite numbers (at any depth)."""
    t = type(value)
    if t is dict:
        stack = list(value.values())
    elif t is list:
        stack = list(value)
    elif t is float:
        return bool(value - value == 0.0)  # inf - inf and nan - nan are nan
    else:
        return True
    pop, extend = stack.pop, stack.extend
    while stack:
        v = pop()
        t = type(v)
        if t is dict:
            extend(v.values())
        elif t is list:
            extend(v)
        elif t is float and v - v != 0.0:
            return False
    return True


def nonfinite_path(value: Any, path: str = "") -> str | None:
    """Where the first NaN or infinite number in ``value`` is (``rows.3.price``), or None.
    Only the error path calls it: the depth is bounded by the parser (``MAX_DEPTH``)."""
    if type(value) is float:
        return None if value - value == 0.0 else path
    items: Any = (value.items() if type(value) is dict
                  else enumerate(value) if type(value) is list else ())
    for key, item in items:
        found = nonfinite_path(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def refusal(kind: str, field: str, value: Any) -> ProtocolError:
    """The ``protocol_error`` for a frame whose ``field`` holds a number JSON cannot carry."""
    where = nonfinite_path(value, field) or field
    return ProtocolError(f"invalid {kind!r} frame: {where}: {RULE}", type=kind, field=field)


def check_frame(frame: Any) -> None:
    """Raise ``ProtocolError`` when a decoded frame's free payload holds NaN or an infinite
    number (``field`` names the payload, the message the path inside it). Only the frames a
    peer sends with a free payload are looked into; an empty payload costs a test."""
    kind = frame.type
    if kind not in _LOOKED_INTO:
        return
    if kind == "submit" or kind == "forward":
        if frame.params and not finite(frame.params):
            raise refusal(kind, "params", frame.params)
        if kind == "submit" and frame.fallback is not None and not finite(frame.fallback):
            raise refusal(kind, "fallback", frame.fallback)
    elif kind == "result":
        if frame.result is not None and not finite(frame.result):
            raise refusal(kind, "result", frame.result)
        if frame.fallback is not None and not finite(frame.fallback):
            raise refusal(kind, "fallback", frame.fallback)
    elif kind == "chunk":
        if frame.data is not None and not finite(frame.data):
            raise refusal(kind, "data", frame.data)
    elif kind == "error":
        if frame.error.details and not finite(frame.error.details):
            raise refusal(kind, "error.details", frame.error.details)
    elif kind == "command":
        if frame.args and not finite(frame.args):
            raise refusal(kind, "args", frame.args)
    elif kind == "register":
        for i, spec in enumerate(frame.capabilities):
            if spec.fallback is not None and not finite(spec.fallback):
                raise refusal(kind, f"capabilities.{i}.fallback", spec.fallback)


def may_hold_nonfinite(raw: str | bytes) -> bool:
    """Whether JSON text ``raw`` may hold NaN or an infinite number; False is certain."""
    pattern = _SUSPECT_BYTES if type(raw) is bytes else _SUSPECT_TEXT
    return pattern.search(raw) is not None  # type: ignore[arg-type]


def check_parsed(frame: Any, raw: str | bytes) -> None:
    """``check_frame`` for a frame decoded from ``raw``, walking its payload only when the
    text has something that could be a number JSON cannot carry."""
    if may_hold_nonfinite(raw):
        check_frame(frame)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is out of a double's range: {RULE}")
    return value


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON: {RULE}")


def loads_finite(data: str | bytes) -> Any:
    """``json.loads`` for what an adapter's agent answers (an HTTP body, a command's stdout):
    ``NaN``, ``Infinity`` and numbers past a double's range (``1e400``) are a ``ValueError``,
    as at the coordinator's doors, instead of reaching the caller as ``null``."""
    return json.loads(data, parse_float=_finite_float, parse_constant=_no_constant)
