"""Phrases learned from callers' choices (pure): the request a caller made in words, and the
capability it picked when intent routing refused to guess.

When ``resolve`` abstains it lists the closest capabilities; a caller that then picks one
(``Client.call_intent(text, choose=...)``, or a submit naming both the capability and the
same intent text) teaches the coordinator that phrase. Next time the same words route
straight there. The phrase does not join the capability's declared intents: on the dev
half of the labelled set that made requests that routed before ambiguous or wrong (a
taught phrase's incidental words become a neighbour's evidence) and gave unseen
paraphrases next to nothing (docs/benchmarks.md, "Intent routing", 2026-12-06).

Only a choice among what the coordinator itself suggested is learned (``teaches``): a
caller cannot teach "refund my order" → ``account.delete`` unless routing already thought
that capability close. The book is bounded (``LIMIT``, the oldest forgotten first) and kept
per coordinator; the edge persists it and operators list and remove phrases
(docs/intent.md, "Learned phrases").
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from reach.core.intent import Decision, Outcome
from reach.core.intent_text import phrase_key as key

# How many phrases one coordinator keeps; past it the oldest learned is forgotten.
LIMIT = 10_000
# The longest phrase learned, in characters (a longer request is still routed, not learned).
MAX_PHRASE = 500


@dataclass(frozen=True, slots=True)
class Phrase:
    """One learned phrase: the text as the caller wrote it, the capability it chose, when
    (wall clock) and who taught it."""

    text: str
    capability: str
    learned_at: float
    caller: str = ""

    def view(self) -> dict[str, object]:
        return {"text": self.text, "key": key(self.text), "capability": self.capability,
                "learned_at": self.learned_at, "caller": self.caller}


def teaches(decision: Decision, capability: str) -> bool:
    """Whether choosing ``capability`` for a request ``decision`` was made on teaches
    anything: routing did not already go there, and it was one of the capabilities the
    refusal offered (a candidate or a suggestion)."""
    if decision.outcome not in (Outcome.WEAK, Outcome.AMBIGUOUS):
        return False
    return capability in decision.candidates or capability in decision.suggestions


class Learned:
    """The learned phrases, by ``key``: bounded, oldest forgotten first."""

    __slots__ = ("_phrases", "limit")

    def __init__(self, limit: int = LIMIT) -> None:
        self._phrases: OrderedDict[str, Phrase] = OrderedDict()
        self.limit = limit

    def __len__(self) -> int:
        return len(self._phrases)

    def route(self, text: str) -> str | None:
        """The capability learned for this request, if any."""
        if not self._phrases:
            return None
        found = self._phrases.get(key(text))
        return None if found is None else found.capability

    def add(self, phrase: Phrase) -> list[Phrase]:
        """Learn ``phrase`` (a later choice for the same key replaces the earlier one);
        returns the phrases forgotten to stay within ``limit``."""
        k = key(phrase.text)
        if not k or len(phrase.text) > MAX_PHRASE:
            return []
        self._phrases.pop(k, None)
        self._phrases[k] = phrase
        dropped = []
        while len(self._phrases) > self.limit:
            dropped.append(self._phrases.popitem(last=False)[1])
        return dropped

    def remove(self, text: str) -> Phrase | None:
        """Forget the phrase for this request (by its ``key``); None when none was learned."""
        return self._phrases.pop(key(text), None)

    def phrases(self, capability: str | None = None) -> list[Phrase]:
        """Every learned phrase (of ``capability``, when given), oldest first."""
        return [p for p in self._phrases.values()
                if capability is None or p.capability == capability]

