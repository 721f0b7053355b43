"""Smoke test for the soak: ``bench/soak.py --quick`` (200 tasks, 2 agent processes, one agent
SIGKILL, one coordinator SIGKILL) runs end to end, prints its table, and loses nothing: no
acknowledged task without a terminal state, no idempotency key executed twice."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "soak.py"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def row(lines: list[str], name: str) -> str:
    """The value column of the table row called ``name``."""
    found = [ln[len(name):].strip() for ln in lines if ln.startswith(name + "  ")]
    assert len(found) == 1, (name, lines)
    return found[0]


def test_soak_quick_prints_the_table_and_loses_nothing() -> None:
    proc = subprocess.run(
        # --quick stops itself within its 60 s (--seconds); the rest is start-up and margin.
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=90,
        cwd=BENCH.parents[1], stdin=subprocess.DEVNULL)
    out = proc.stdout
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{proc.stderr[-3000:]}"
    lines = out.splitlines()
    assert any(ln.split()[:2] == ["metric", "value"] for ln in lines), out
    assert row(lines, "tasks submitted").split()[0] == "200"
    assert row(lines, "tasks acknowledged") == "200"
    assert row(lines, "tasks lost") == "0"
    assert row(lines, "keys executed twice") == "0"
    assert row(lines, "agent SIGKILLs / coordinator SIGKILLs") == "1 / 1", out
    for name in ("tasks dead-lettered", "retry amplification", "latency p50", "latency p99"):
        assert row(lines, name), name
    # attempts / tasks: below 1 when tasks die without an attempt (no healthy agent)
    assert float(row(lines, "retry amplification").split()[0]) > 0
    # The burst (issue 27): ten times the agents' slots at once, and accepted work waits
    assert row(lines, "burst: tasks at once (x the agents' slots)") == "1280  (10x)"
    assert row(lines, "burst: rejected after acceptance") == "0"
    assert row(lines, "burst: refused at the door") == "0"  # under max_backlog
    assert row(lines, "burst: backlog wait p50 / p99").endswith(" ms")
    assert "result: PASS" in out
