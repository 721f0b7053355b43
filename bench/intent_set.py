"""The labelled intent set (bench/intent_catalogue.toml, bench/intent_phrasings.toml) and how
a matcher is scored on it; shared by bench/intent.py and tests/core/test_intent_set.py.

A phrasing's split is fixed by its position in its list (see the phrasings file): the lists
alternate Chinese and English, so phrasings go to a half in pairs — positions 0–1 of the
first list (``abstain``) to dev, 2–3 to held-out, and so on, each next list starting with the
other half — and both halves hold both languages. (Until 2026-12-05 even positions were dev
and odd ones held-out, which put nearly all Chinese in dev and English in held-out:
thresholds calibrated on one language were scored on the other.)
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from reach.core.intent import Entry

HERE = Path(__file__).resolve().parent
DEV, HELD_OUT = "dev", "held-out"


@dataclass(frozen=True, slots=True)
class Case:
    text: str
    expect: str | None  # None: nothing in the catalogue fits; the right answer is to abstain
    split: str


def catalogue() -> list[Entry]:
    data = tomllib.loads((HERE / "intent_catalogue.toml").read_text("utf-8"))
    return [Entry(c["name"], tuple(c["intents"]), c["description"], tuple(c["tags"]))
            for c in data["capability"]]


def cases() -> list[Case]:
    data = tomllib.loads((HERE / "intent_phrasings.toml").read_text("utf-8"))
    lists: list[tuple[str | None, list[str]]] = [(None, data["abstain"])]
    lists += list(data["route"].items())
    return [Case(text, expect, DEV if (i // 2 + n) % 2 == 0 else HELD_OUT)
            for n, (expect, texts) in enumerate(lists) for i, text in enumerate(texts)]


@dataclass(slots=True)
class Tally:
    """How a matcher did on some cases. ``top1`` is over the phrasings something fits; the
    wrong-route and abstain rates are over all phrasings."""

    cases: int = 0
    fitting: int = 0          # phrasings with a capability that fits
    correct: int = 0          # ... routed to it
    missed: int = 0           # ... not routed at all
    wrong: int = 0            # routed to a capability that is not the answer (either kind)
    outside: int = 0          # phrasings nothing fits
    outside_abstained: int = 0

    @property
    def top1(self) -> float:
        return self.correct / self.fitting if self.fitting else 0.0

    @property
    def wrong_rate(self) -> float:
        return self.wrong / self.cases if self.cases else 0.0

    @property
    def abstain_rate(self) -> float:
        return (self.missed + self.outside_abstained) / self.cases if self.cases else 0.0


def evaluate(route: Callable[[str], str | None], some: Iterable[Case],
             failures: list[tuple[Case, str | None]] | None = None) -> Tally:
    """Score ``route`` (text → capability or None) on ``some``; wrong answers are appended to
    ``failures`` when given."""
    tally = Tally()
    for case in some:
        got = route(case.text)
        tally.cases += 1
        if case.expect is None:
            tally.outside += 1
            tally.outside_abstained += got is None
        else:
            tally.fitting += 1
            tally.correct += got == case.expect
            tally.missed += got is None
        if got is not None and got != case.expect:
            tally.wrong += 1
        if got != case.expect and failures is not None:
            failures.append((case, got))
    return tally


def learning_row(split: str, name: str, t: Tally, offered: float | None,
                 learned: int | None) -> str:
    """One line of the benches' "learning from choices" table: a pass over one half (the
    first pass shows the share offered, the second how many phrases were learned)."""
    extra = (f"  {'':>7}  {offered:>7.1%}" if offered is not None
             else f"  {learned if learned is not None else '':>7}  {'':>7}")
    return (f"  {split:<9}  {name:<16}  {t.top1:>6.1%}  {t.wrong_rate:>11.1%}  "
            f"{t.abstain_rate:>7.1%}  {t.outside_abstained:>10} of {t.outside:<7}{extra}")
