"""Every call has a budget (DESIGN.md): the coordinator's function calls per synchronous call,
and the SDKs' (the caller's and the agent's, one process), counted by tools/callcount.py
against a real coordinator, agent and caller, stay within the figures written in
bench/call_budget.toml. A count, not a time: it does not flake on a loaded machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUDGET = ROOT / "bench" / "call_budget.toml"
SIDES = {"sqlite": ("coordinator", "the coordinator"),
         "sdk": ("sdk", "the caller's and agent's process")}


@pytest.mark.parametrize("section", sorted(SIDES))
def test_the_work_per_call_stays_within_its_budget(section: str) -> None:
    side, who = SIDES[section]
    budget = tomllib.loads(BUDGET.read_text())[section]
    calls = int(budget.pop("calls"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE")}
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "callcount.py"), "--store", "sqlite",
         "--side", side, "--calls", str(calls), "--inflight", *budget, "--json"],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    counted = json.loads(run.stdout)["per_call"]
    over = {k: (counted[k], limit) for k, limit in budget.items() if counted[k] > limit}
    assert not over, (
        f"{who} now makes more function calls per call than its budget "
        f"(in flight: (counted, budget)): {over}. See where they go with "
        f"`python tools/callcount.py --side {side} --top 30`; make the new work free when "
        f"unused, or raise the budget in bench/call_budget.toml in this commit and say why there.")
    # The measure measures something: a call is hundreds of function calls, not none.
    assert all(counted[k] > 100 for k in budget)
