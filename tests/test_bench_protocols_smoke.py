"""Smoke test for the protocols benchmark: ``bench/protocols.py --quick`` runs end to end and
prints one row per protocol (MCP, A2A) with a ratio (timings on a shared machine are not checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "protocols.py"


def test_protocols_bench_quick_prints_the_mcp_and_a2a_rows() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=120,
        cwd=BENCH.parents[1], stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["protocol", "bare", "µs/call", "reach", "µs/call", "ratio"]
    for name in ("mcp tools/call", "a2a SendMessage"):
        row = next(ln for ln in lines if ln.startswith(name))
        bare, through, ratio = row.split()[-3:]
        assert float(bare) > 0 and float(through) > 0 and float(ratio) > 0
