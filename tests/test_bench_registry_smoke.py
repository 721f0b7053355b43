"""Smoke test for the registry benchmark: ``bench/registry.py --quick`` runs end to end and
prints its three tables and the targets (numbers are not checked: a miss is not a bug in the
benchmark, and timings on a shared machine say nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "registry.py"
STRATEGIES = ("weighted", "least_load", "lowest_latency", "round_robin", "random")


def _table(lines: list[str], first_words: list[str]) -> list[list[str]]:
    """The rows under the header starting with ``first_words`` (up to a blank line)."""
    header = [i for i, ln in enumerate(lines) if ln.split()[:len(first_words)] == first_words]
    assert header, f"no table headed {first_words}"
    rows = []
    for ln in lines[header[0] + 2:]:
        if not ln.strip():
            break
        rows.append(ln.split())
    return rows


def test_registry_bench_quick_prints_its_tables() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=55,
        cwd=BENCH.parents[1], stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.splitlines()

    routing = _table(lines, ["strategy", "agents", "p50", "µs", "p99", "µs"])
    cells = {(r[0], r[1]) for r in routing}
    for strategy in STRATEGIES:
        for agents in ("1", "100", "1,000", "10,000"):
            assert (strategy, agents) in cells, proc.stdout

    sweep = _table(lines, ["agents", "beat", "every", "sweep", "every", "sweep", "ms"])
    assert sweep and all(len(r) == 8 for r in sweep), proc.stdout

    beats = _table(lines, ["agents", "procs", "connect", "s"])
    assert beats and all(len(r) == 14 for r in beats), proc.stdout
    assert "scaled to 10,000 agents beating every 10 s" in proc.stdout
    assert "open-files limit" in proc.stdout

    targets = lines[lines.index("targets"):]
    assert sum("routing p99 at 10,000 agents" in ln for ln in targets) == len(STRATEGIES)
    assert all(("PASS" in ln) or ("MISS" in ln) for ln in targets[1:] if ln.strip())
