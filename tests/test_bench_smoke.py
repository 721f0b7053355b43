"""Smoke test for the relay benchmark: ``bench/relay.py --quick`` runs end to end and prints
the table with the raw row and both Reach rows (numbers are not checked: a miss is not a bug
in the benchmark)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "relay.py"


def test_relay_bench_quick_prints_the_table() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=60,
        cwd=BENCH.parents[1], stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    header = [ln for ln in lines if ln.split()[:2] == ["config", "in-flight"]]
    assert header, proc.stdout
    for word in ("calls/s", "p50 ms", "p99 ms", "vs floor"):
        assert word in header[0]
    rows = [ln.split() for ln in lines[lines.index(header[0]) + 2:] if ln.strip()]
    names = {r[0] for r in rows if len(r) >= 5 and r[1] in ("1", "64")}
    assert {"raw", "raw-eager"} <= names, proc.stdout
    assert {"reach-sqlite-file", "reach-memory"} <= names, proc.stdout
    for name in ("raw", "reach-sqlite-file", "reach-memory"):
        assert {r[1] for r in rows if r and r[0] == name} >= {"1", "64"}, proc.stdout
    assert "targets (against the floor" in proc.stdout
    assert ("PASS" in proc.stdout) or ("MISS" in proc.stdout)
