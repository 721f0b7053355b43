"""The intent matcher reach shipped before issue 13, kept verbatim as bench/intent.py's baseline.

It ranked capabilities by shared features (English words, CJK bigrams) weighted 1/df, built
the features of the whole catalogue on every call, and routed when the best score reached one
distinctive feature and nothing tied it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reach.core import names

_WORD = re.compile(r"[a-z0-9]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")
_STOP = frozenset("a an the of for to in on at by me my our please show get give tell what "
                  "is are was were how do does can could would you i we".split())


def features(text: str) -> frozenset[str]:
    """English words (lowercased, no stop words) and bigrams of CJK characters."""
    lowered = text.lower()
    out = {w for w in _WORD.findall(lowered) if w not in _STOP}
    for run in _CJK.findall(lowered):
        out.update(run[i:i + 2] for i in range(len(run) - 1))
        if len(run) == 1:
            out.add(run)
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Match:
    capability: str
    score: float


def rank(text: str, catalogue: Mapping[str, Sequence[str]]) -> list[Match]:
    """Capabilities ordered by evidence: shared features, each weighted 1/(how many
    capabilities have it), so a word every capability uses ("query") counts little."""
    by_cap = {cap: features(" ".join([" ".join(names.words(cap)), *phrases]))
              for cap, phrases in catalogue.items()}
    df: dict[str, int] = {}
    for feats in by_cap.values():
        for f in feats:
            df[f] = df.get(f, 0) + 1
    wanted = features(text)
    out = [Match(cap, round(sum(1.0 / df[f] for f in wanted & feats), 4))
           for cap, feats in by_cap.items()]
    out.sort(key=lambda m: (-m.score, m.capability))
    return out


def resolve(text: str, catalogue: Mapping[str, Sequence[str]],
            threshold: float = 1.0) -> tuple[str | None, list[str]]:
    """The best capability for ``text`` and the closest names. None when the evidence is under
    ``threshold`` (one distinctive shared feature) or two capabilities tie for first."""
    ranked = rank(text, catalogue)
    closest = [m.capability for m in ranked[:3] if m.score > 0]
    if not ranked or ranked[0].score < threshold:
        return None, closest
    if len(ranked) > 1 and ranked[1].score == ranked[0].score:
        return None, closest
    return ranked[0].capability, closest
