"""Numbers JSON cannot carry: NaN, Infinity, and literals past a double's range (``1e400``).

A frame's typed number fields refuse them (``allow_inf_nan=False``), but pydantic-core's
parser reads ``1e400`` as ``inf``, and a free payload (``params``, a ``result``, a chunk's
``data``, an error's ``details``, a command's ``args``, a fallback's value) takes ``NaN`` and
``Infinity`` as they come. Encoded again they turn into ``null``: a number the caller sent
reached the agent as ``null``, after passing the capability's schema as a number. This
finds them in a decoded payload, so the door refuses the frame or body instead.

Such a number can only be written as ``NaN``, ``Infinity`` or a literal with a three-digit
exponent or with 210 digits or more before its point, so a few substring tests of the frame's
text say whether the payload needs looking into; only then is it walked (its containers: a
string or a number costs nothing), on the fields that can hold a free value. The path to the
culprit is worked out on the error path alone.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic_core import from_json

from reach.errors import ProtocolError

__all__ = ["RULE", "check_frame", "check_parsed", "finite", "loads_finite", "may_hold_nonfinite",
           "nonfinite_path", "refusal"]

# The frames a peer sends with a free payload (the typed fields are checked by their models).
_LOOKED_INTO = frozenset(("submit", "forward", "result", "chunk", "error", "command",
                          "register"))
# What every NaN, infinite or out-of-range number in JSON text contains: one of the two
# literals, a digit then an exponent of three digits or more that ends the number (1e400,
# 1E+0308: a JSON number ends at a comma, bracket, brace, space or the end; inside a hex id
# such as "3e412f" the exponent-like part runs on), or a run of 210 digits or more (a number
# past 1.8e308 with an exponent under 100 has at least 309 - 99 digits before its point: 1 and
# 300 zeros then e10; JSON allows no leading zero). The text is mapped byte for byte (a digit
# to 0, E to e, what ends a number to a space, any other byte but + to x), so that each shape
# is a substring search in C: a regular expression trying four alternatives at every offset
# cost 3-6 us a frame, a twentieth of the coordinator's own work per call. Text without any is
# finite throughout; text with one (a string saying "NaN", 1e100) is walked.
_SHAPES = bytes(ord("0") if chr(b).isdigit() and b < 128 else ord("e") if chr(b) in "eE"
                else ord("+") if b == ord("+") else ord(" ") if chr(b) in ",]} \t\n\r"
                else ord("x") for b in range(256))
_EXPONENTS = (b"0e000", b"0e+000")
_LONG = b"0" * 210
_ZERO, _END = ord("0"), ord(" ")
_isfinite = math.isfinite
RULE = ("a number is NaN, Infinity or out of a double's range (such as 1e400), which JSON "
        "cannot carry (it would arrive as null); send a finite number, or the value as a string")


def finite(value: Any) -> bool:
    """Whether a decoded JSON value holds only finite numbers (at any depth).

    A list that starts with a number is summed first, in C: one NaN or infinity makes the sum
    non-finite, so a finite sum clears the whole list (an embedding of 384 floats: 2 µs instead
    of 25). A sum that overflows, or a list that is not all numbers, is looked at element by
    element as any other container."""
    t = type(value)
    if t is dict:
        stack = list(value.values())
    elif t is list:
        stack = [value]
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
            if v and (type(v[0]) is float or type(v[0]) is int):
                try:
                    if _isfinite(sum(v)):
                        continue
                except (TypeError, OverflowError):  # not all numbers; an int past a double
                    pass
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
    data = raw if type(raw) is bytes else raw.encode(  # type: ignore[union-attr]
        "utf-8", "surrogatepass")
    # (``find``, not ``in``: bytes' ``in`` first tries its operand as an int, which raises and
    # clears a TypeError each time, about 2,000 instructions: 10 a call. A capital N or I is
    # rare in a frame, and a one-byte ``find`` is a memchr: the literals are searched after.)
    if (data.find(b"N") >= 0 and data.find(b"NaN") >= 0) or (
            data.find(b"I") >= 0 and data.find(b"Infinity") >= 0):
        return True
    shapes = data.translate(_SHAPES)
    if shapes.find(_EXPONENTS[0]) >= 0 or shapes.find(_EXPONENTS[1]) >= 0:  # an id's, or not?
        if _ends_an_exponent(shapes):
            return True
    return shapes.find(_LONG) >= 0


def _ends_an_exponent(shapes: bytes) -> bool:
    """Whether mapped text has a three-digit exponent that ends its number."""
    size = len(shapes)
    for shape in _EXPONENTS:
        at = shapes.find(shape)
        while at >= 0:
            end = at + len(shape)
            while end < size and shapes[end] == _ZERO:
                end += 1
            if end == size or shapes[end] == _END:
                return True
            at = shapes.find(shape, end)
    return False


def check_parsed(frame: Any, raw: str | bytes) -> None:
    """``check_frame`` for a frame decoded from ``raw``, walking its payload only when the
    text has something that could be a number JSON cannot carry. A kind of frame with no free
    payload to look into (an invoke, an ack, a welcome) is not searched at all."""
    if frame.type in _LOOKED_INTO and may_hold_nonfinite(raw):
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
    as at the coordinator's doors, instead of reaching the caller as ``null``.

    pydantic-core's parser reads a common answer in a third of the time; whatever it refuses
    or reads as an infinity goes to ``json.loads`` again, which says precisely what is wrong
    (and still reads the little only it takes: a byte-order mark, a lone surrogate)."""
    try:
        value = from_json(data, allow_inf_nan=False)
    except ValueError:
        pass
    else:
        if finite(value):
            return value
    return json.loads(data, parse_float=_finite_float, parse_constant=_no_constant)
