"""Smoke test for the intent benchmark: ``bench/intent.py --quick`` runs end to end and prints
its accuracy table for both splits and both matchers, the cost table at 20 and 500
capabilities and the targets (numbers are not checked here: tests/core/test_intent_set.py
pins the accuracy, and timings on a shared machine say nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "intent.py"


def _rows(lines: list[str], first_words: list[str]) -> list[list[str]]:
    at = [i for i, ln in enumerate(lines) if ln.split()[:len(first_words)] == first_words]
    assert at, f"no table headed {first_words}"
    rows = []
    for ln in lines[at[0] + 2:]:
        if not ln.startswith("  ") or not ln.strip() or ln.split()[0].endswith(":"):
            break
        rows.append(ln.split())
    return rows


def test_intent_bench_quick_prints_its_tables_and_targets() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=120,
        cwd=BENCH.parents[1], stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.splitlines()

    accuracy = _rows(lines, ["split", "matcher", "phrasings"])
    assert {(r[0], r[1]) for r in accuracy} == {
        ("dev", "new"), ("dev", "old"), ("held-out", "new"), ("held-out", "old")}, proc.stdout
    assert all(r[2] == "262" and r[3] in ("232", "234") and r[4].endswith("%") for r in accuracy)

    cost = _rows(lines, ["capabilities", "new", "µs"])
    assert [r[0] for r in cost] == ["20", "500"], proc.stdout
    assert all(len(r) == 6 for r in cost)

    targets = lines[lines.index("targets") + 1:]
    assert len(targets) == 10 and all(ln.endswith(("PASS", "MISS")) for ln in targets)
    assert sum("held-out" in ln for ln in targets) == 5

    learning = _rows(lines, ["split", "pass", "top-1"])
    assert [r[:2] for r in learning] == [["dev", "first"], ["dev", "after"],
                                         ["held-out", "first"], ["held-out", "after"]]
    assert all(r[-1].endswith("%") for r in learning if r[1] == "first"), proc.stdout
