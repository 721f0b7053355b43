"""bench/peer_hop.py at a tiny size: it runs, links two nodes and prints both paths and the
hop's added p50 (numbers are not checked: they belong to the machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_hop_benchmark_prints_both_paths() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "peer_hop.py"), "--calls", "40", "--rounds",
         "2", "--inflight", "4"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    assert "caller on B -> agent on B" in run.stdout
    assert "caller on A -> agent on B" in run.stdout
    assert "the hop adds" in run.stdout and "calls/s with 4 in flight" in run.stdout
