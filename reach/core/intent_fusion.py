"""Intent routing with a model (pure): the lexical evidence and a model's similarity per
capability, fused into one score, then the same refusal rules as ``intent.resolve``.

The optional ``agent-reach[intent]`` extra (``reach.intent_model``) embeds the catalogue and
the request with a small multilingual model; this module only sees numbers, so it is tested
with plain calls. Per capability it takes

* the lexical evidence, as ``intent.score`` gives it (0 for a capability no feature of the
  request touches; about 1.0 for one distinctive shared word), squashed to ``[0, 1)`` as
  ``lex / (lex + half)`` so that one very wordy match cannot outvote the model alone;
* the model's cosine similarity between the request and the capability, rescaled so that
  ``zero`` (about what an unrelated request scores with this model: its cosines are never
  far from 0.8) counts nothing and 1.0 counts in full;

and mixes them, ``weight`` of the model and the rest lexical. ``decide`` then refuses to
guess exactly as the lexical matcher does: it routes only when the best fused score reaches
``floor`` *and* leads the runner-up by ``gap``; else the request is AMBIGUOUS (two close
candidates) or WEAK (nothing fits well enough), with the closest capabilities as
suggestions, best first.

The constants (``CALIBRATED``; ``MODEL_ALONE`` for the model without the lexical half) are
calibrated on the dev half of the labelled set only, by ``bench/intent_model.py
--calibrate``: no "nothing fits" phrasing routed and at most 1 % of the phrasings routed
wrong, then the most routed right. The held-out half is reported once, never tuned on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reach.core.intent import SUGGESTIONS, Decision, Outcome


@dataclass(frozen=True, slots=True)
class Calibration:
    """How the two scores are fused and when the fused score routes (see the module doc)."""

    weight: float    # share of the model in the fused score: 0 lexical alone, 1 model alone
    half: float      # lexical evidence that counts half
    zero: float      # the cosine that counts nothing
    floor: float     # the fused score the best capability needs to be routed to
    gap: float       # how far (in fused score) it must lead the runner-up
    suggest: float   # the fused score a capability needs to be suggested

    def __post_init__(self) -> None:
        if not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"weight must be in [0, 1], not {self.weight}")
        if self.half <= 0.0 or not -1.0 <= self.zero < 1.0:
            raise ValueError("half must be positive and zero in [-1, 1)")


# Calibrated on the dev half (bench/intent_model.py --calibrate; the halves by pairs, both
# languages in each, 2026-12-05); see docs/benchmarks.md.
CALIBRATED = Calibration(weight=0.8, half=2.0, zero=0.75, floor=0.43, gap=0.07, suggest=0.21)
# The model alone (the lexical evidence ignored), calibrated the same way: the bench's row.
MODEL_ALONE = Calibration(weight=1.0, half=0.5, zero=0.8, floor=0.35, gap=0.08, suggest=0.17)


def fused(lexical: Mapping[str, float], model: Mapping[str, float],
          calibration: Calibration = CALIBRATED) -> list[tuple[str, float]]:
    """Every capability named in either mapping with its fused score, best first (ties by
    name). A capability missing from ``lexical`` has no lexical evidence; one missing from
    ``model`` counts as ``zero`` (the caller passes the model's closest capabilities and
    every one with lexical evidence, so the best ones are all there)."""
    c = calibration
    scale = 1.0 - c.zero
    out: list[tuple[str, float]] = []
    for name in lexical.keys() | model.keys():
        lex = max(lexical.get(name, 0.0), 0.0)
        cos = model.get(name, c.zero)
        sem = min(max((cos - c.zero) / scale, 0.0), 1.0)
        out.append((name, (1.0 - c.weight) * lex / (lex + c.half) + c.weight * sem))
    out.sort(key=lambda kv: (-kv[1], kv[0]))
    return out


def decide(lexical: Mapping[str, float], model: Mapping[str, float],
           calibration: Calibration = CALIBRATED) -> Decision:
    """Route on the fused score (``fused``): MATCH when the best reaches ``floor`` and leads
    the runner-up by ``gap``; AMBIGUOUS when it reaches ``floor`` but another is as close;
    WEAK otherwise. ``suggestions`` lists up to ``SUGGESTIONS`` capabilities whose fused
    score reaches ``suggest``, best first; ``scores`` shows the top fused scores."""
    c = calibration
    ranked = fused(lexical, model, c)
    top = ranked[:SUGGESTIONS]
    shown = tuple((name, round(s, 4)) for name, s in top)
    suggestions = tuple(name for name, s in top if s >= c.suggest)
    if not top or top[0][1] < c.floor:
        return Decision(Outcome.WEAK, suggestions=suggestions, scores=shown)
    best, runner = top[0], top[1] if len(top) > 1 else ("", 0.0)
    if best[1] - runner[1] < c.gap:
        return Decision(Outcome.AMBIGUOUS, candidates=tuple(n for n in (best[0], runner[0]) if n),
                        suggestions=suggestions, scores=shown)
    return Decision(Outcome.MATCH, capability=best[0], suggestions=suggestions, scores=shown)
