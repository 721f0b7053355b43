"""Smoke tests: ``bench/durable.py --quick`` prints both tables, and ``bench/all.py`` runs a
benchmark and collects its output into Markdown (numbers are not checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def test_durable_bench_quick_prints_both_tables() -> None:
    out = _run("bench/durable.py", "--quick").stdout
    assert "1. the store alone" in out and "2. end to end" in out
    rows = [ln.split() for ln in out.splitlines()]
    store = [r for r in rows if len(r) == 6 and r[0] in ("normal", "full") and r[1] == "/"]
    assert {(r[0], r[2]) for r in store} >= {("normal", "1"), ("normal", "64"), ("full", "64")}
    assert all(r[-1].endswith("x") for r in store)
    e2e = [r for r in rows if len(r) == 4 and r[0] in ("1", "16", "64") and r[-1].endswith("x")]
    assert [r[0] for r in e2e] == ["1", "16", "64"]


def test_all_collects_a_benchmark_into_markdown(tmp_path: Path) -> None:
    report = tmp_path / "bench.md"
    out = _run("bench/all.py", "--quick", "--only", "bench/durable.py", "--out",
               str(report)).stdout
    assert "=== bench/durable.py" in out
    text = report.read_text()
    assert text.startswith("# Benchmarks")
    assert "## Durable submits" in text and "1. the store alone" in text
    assert "cpu, Python" in text
