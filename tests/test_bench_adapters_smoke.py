"""bench/adapters.py at smoke sizes: both sections run against their direct baselines and
print a verdict for each target (numbers are not checked: this machine is shared)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "adapters.py"


def test_adapters_bench_prints_both_sections_with_verdicts() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True,
                          text=True, timeout=55, cwd=BENCH.parents[1], stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    out = proc.stdout
    http, _, stdio = out.partition("### stdio process agent")
    assert "### HTTP agent" in http and stdio
    for section in (http, stdio):
        verdicts = section.count("PASS") + section.count("MISS")
        assert verdicts >= 2, section
