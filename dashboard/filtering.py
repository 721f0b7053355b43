"""The `/` filter: a few words, each of which a row must contain somewhere.

``error:timeout agent:sales`` restricts a word to one field of the row; a word whose prefix is
not a field of the table (``http://x``) is an ordinary word. Matching is case-insensitive
substring matching. The filter runs here, not on the coordinator, so ``R`` replays exactly the
letters the table shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ALIASES = {"cap": "capability", "err": "error", "id": "task"}
"""Short forms accepted before the colon."""


@dataclass(frozen=True)
class Filter:
    """A parsed filter; the empty filter matches every row."""

    text: str = ""
    words: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Filter:
        return cls(text=text.strip(), words=tuple(w.lower() for w in text.split()))

    def __bool__(self) -> bool:
        return bool(self.words)

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Whether a row with these searchable ``{field: text}`` values passes every word."""
        return all(self._word_matches(word, fields) for word in self.words)

    @staticmethod
    def _word_matches(word: str, fields: Mapping[str, str]) -> bool:
        name, sep, value = word.partition(":")
        name = ALIASES.get(name, name)
        if sep and name in fields:
            return value in fields[name].lower()
        return any(word in text.lower() for text in fields.values())
