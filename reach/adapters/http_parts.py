"""The pure parts of an HTTP call (reach.adapters.http): a path template filled from params,
params as query pairs, and why a service could not be reached, in HTTP words."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote, unquote

from reach.adapters.base import AdapterAnswer


def unreachable(url: str, exc: BaseException) -> str:
    """Why nothing reached ``url``, in HTTP words: "connection refused by http://…",
    "could not connect to http://…: <reason>"."""
    os_error = getattr(exc, "os_error", exc)
    if isinstance(os_error, ConnectionRefusedError):
        return f"connection refused by {url}"
    reason = getattr(os_error, "strerror", None) or str(os_error) or type(os_error).__name__
    return f"could not connect to {url}: {reason}"


def fill(template: str, fields: tuple[str, ...], params: dict[str, Any]) -> str:
    """The path with its ``{name}`` segments filled (and taken out of ``params``)."""
    path = template
    for name in fields:
        if name not in params:
            raise AdapterAnswer(f"the params have no {name!r}, which the path {template!r} "
                                f"needs", missing=name)
        value = params.pop(name)
        text = json.dumps(value) if isinstance(value, bool | dict | list) or value is None \
            else str(value)
        if climbs(text):
            raise AdapterAnswer(
                f"param {name!r} = {text[:100]!r} would be a '.' or '..' segment of the path "
                f"{template!r} (a server resolves it, reaching above the agent's url): "
                f"refused", wire_code="invalid_params", param=name)
        path = path.replace("{" + name + "}", quote(text, safe=""))
    return path


DECODE_ROUNDS = 4  # %252e%252e → %2e%2e → ..: servers and proxies that decode twice exist


def climbs(text: str) -> bool:
    """Whether a path param could be read as a dot segment by some server: itself, or any
    piece between slashes or backslashes, is ``.`` or ``..`` once percent-decoded (up to
    ``DECODE_ROUNDS`` times). Its ``/`` and ``%`` are percent-encoded when sent, so only a
    server that decodes them would split it; such servers exist, so those are refused too."""
    if "." not in text and "%" not in text:  # (most params: one scan, nothing to decode)
        return False
    for _ in range(DECODE_ROUNDS):
        if any(piece in (".", "..") for piece in re.split(r"[/\\]", text)):
            return True
        decoded = unquote(text)
        if decoded == text:
            return False
        text = decoded
    return any(piece in (".", "..") for piece in re.split(r"[/\\]", text))


def query_pairs(params: dict[str, Any]) -> list[tuple[str, str]]:
    """Params as query pairs: lists repeat the name, true/false/null and objects as JSON."""
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        for item in value if isinstance(value, list) else (value,):
            pairs.append((key, item if isinstance(item, str) else
                          str(item) if isinstance(item, int | float) and not isinstance(item, bool)
                          else json.dumps(item, separators=(",", ":"))))
    return pairs
