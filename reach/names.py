"""Capability names: normalize every spelling to lowercase ``domain.verb`` and spot look-alikes.

Teams registered ``inventory.query``, ``query_inventory`` and ``InventoryQuery`` for the same
thing, and case-sensitive matching found none of them. Here all three become ``inventory.query``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from functools import lru_cache

# Words that read as the action. "QueryInventory" and "InventoryQuery" both put the verb last.
VERBS = frozenset(
    "query get list search find fetch read lookup create add put post write update set patch "
    "delete remove generate summarize summarise classify analyze analyse run execute compute "
    "send notify translate embed predict score check validate render convert export import "
    "sync upload download stream count report plan schedule book cancel".split()
)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[\s_\-/:]+")


def words(name: str) -> list[str]:
    """Split any spelling (camelCase, snake_case, kebab, dotted) into lowercase words."""
    parts: list[str] = []
    for dotted in name.strip().split("."):
        for chunk in _SEPARATORS.split(_CAMEL.sub(" ", dotted)):
            if chunk:
                parts.append(chunk.lower())
    return parts


@lru_cache(maxsize=4096)
def normalize(name: str) -> str:
    """Return the canonical ``domain.verb`` form of a capability name.

    A name that already has a dot keeps its order (just lowercased, words joined by ``_``);
    otherwise the verb (a known action word, else the first word) goes last.
    """
    stripped = name.strip()
    if not stripped:
        raise ValueError("capability name is empty")
    if "." in stripped:
        segments = ["_".join(words(seg)) for seg in stripped.split(".")]
        joined = ".".join(s for s in segments if s)
        if not joined:
            raise ValueError(f"capability name {name!r} has no words")
        return joined
    ws = words(stripped)
    if not ws:
        raise ValueError(f"capability name {name!r} has no words")
    if len(ws) == 1:
        return ws[0]
    if ws[0] in VERBS:
        verb, domain = ws[0], ws[1:]
    elif ws[-1] in VERBS:
        verb, domain = ws[-1], ws[:-1]
    else:
        verb, domain = ws[0], ws[1:]
    return f"{'_'.join(domain)}.{verb}"


def shape(name: str) -> frozenset[str]:
    """Words of a name regardless of order: equal shapes mean look-alike names."""
    return frozenset(words(name))


def look_alikes(name: str, known: Iterable[str]) -> list[str]:
    """Known names that differ from ``name`` only in form (same words, other order or case)."""
    target = shape(name)
    return sorted(k for k in known if k != name and shape(k) == target)


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names nearest to ``name``, best first, for ``no_route`` suggestions."""
    pool = sorted(set(known))
    wanted = normalize(name) if name.strip() else name
    hits = difflib.get_close_matches(wanted, pool, n=n, cutoff=0.45)
    overlap = [k for k in pool if k not in hits and shape(k) & shape(wanted)]
    return (hits + overlap)[:n]
