#!/usr/bin/env python3
"""Pick intent routing's refusal thresholds on the dev half only (issue 30).

    python bench/intent_calibrate.py     # grid over FLOOR x LEAD x MARGIN, the best few

For each setting of ``reach.core.intent.FLOOR`` (evidence the best capability needs),
``LEAD`` (evidence only it has) and ``MARGIN`` (how little evidence of its own the runner-up
may have), the lexical matcher is scored on the dev half of the labelled set
(bench/intent_set.py). A setting qualifies when it routes at most ``WRONG_AT_MOST`` of the dev
phrasings to a wrong capability (below the 2 % target, to leave room for the held-out half)
and refuses every dev phrasing nothing fits; of those, the one with the best top-1 wins (ties:
the stricter). The held-out half is never read here: bench/intent.py reports it once the
constants are set.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from intent_set import DEV, Tally, cases, catalogue, evaluate  # noqa: E402

from reach.core import intent  # noqa: E402

WRONG_AT_MOST = 0.015
FLOORS = [round(0.8 + 0.2 * i, 2) for i in range(13)]    # 0.8 .. 3.2
LEADS = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
MARGINS = [0.5, 0.7, 0.8, 0.9, 0.95, 1.0]


def score(floor: float, lead: float, margin: float) -> Tally:
    index = intent.build(catalogue())
    dev = [c for c in cases() if c.split == DEV]
    saved = intent.FLOOR, intent.LEAD, intent.MARGIN
    intent.FLOOR, intent.LEAD, intent.MARGIN = floor, lead, margin
    try:
        return evaluate(lambda text: intent.resolve(text, index).capability, dev)
    finally:
        intent.FLOOR, intent.LEAD, intent.MARGIN = saved


def main() -> int:
    rows = []
    for floor in FLOORS:
        for lead in LEADS:
            for margin in MARGINS:
                t = score(floor, lead, margin)
                ok = t.wrong_rate <= WRONG_AT_MOST and t.outside_abstained == t.outside
                rows.append((ok, t.top1, -t.wrong, floor, lead, margin, t))
    rows.sort(key=lambda r: r[:6], reverse=True)
    now = score(intent.FLOOR, intent.LEAD, intent.MARGIN)
    print(f"dev half: {now.cases} phrasings; now FLOOR={intent.FLOOR} LEAD={intent.LEAD} "
          f"MARGIN={intent.MARGIN}: top-1 {now.top1:.1%}, wrong {now.wrong_rate:.1%}, "
          f"nothing fits refused {now.outside_abstained} of {now.outside}")
    print(f"  {'floor':>5}  {'lead':>4}  {'margin':>6}  {'top-1':>6}  {'wrong':>6}  "
          f"{'abstain':>7}  {'refused':>7}  qualifies")
    for ok, top1, _, floor, lead, margin, t in rows[:12]:
        print(f"  {floor:>5.2f}  {lead:>4.1f}  {margin:>6.2f}  {top1:>6.1%}  "
              f"{t.wrong_rate:>6.1%}  {t.abstain_rate:>7.1%}  "
              f"{t.outside_abstained:>3}/{t.outside:<3}  {ok}")
    best = rows[0]
    print(f"choice: FLOOR={best[3]} LEAD={best[4]} MARGIN={best[5]}" if best[0] else
          "no setting qualifies")
    print("\nhow many suggestions a refusal lists (SUGGESTIONS), by the dev half's top-1 after "
          "one round of choices on it (bench/intent.py's learning pass, on dev):")
    for n in (2, 3, 4, 5, 6):
        t, learned, recall = after_round(n)
        print(f"  {n}: top-1 {t.top1:.1%}, wrong {t.wrong_rate:.1%}, {learned} phrases learned "
              f"(offered: {recall:.1%})")
    return 0


def after_round(suggestions: int) -> tuple[Tally, int, float]:
    """The dev half routed again after one round of choices on it, with ``suggestions``
    (bench/intent.py's ``learning``), and its first pass's suggestion recall."""
    from intent import learning  # bench/intent.py

    saved, intent.SUGGESTIONS = intent.SUGGESTIONS, suggestions
    try:
        _, after, learned, recall = learning(DEV)
        return after, learned, recall
    finally:
        intent.SUGGESTIONS = saved


if __name__ == "__main__":
    sys.exit(main())
