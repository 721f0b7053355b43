"""Smoke tests for the hostile-peer benchmark: ``bench/hostile.py --quick`` runs every attack
against its own coordinator within a bounded time and prints one table row per attack, the
quiet baseline first; ``--list`` names the rows and ``bench/all.py`` runs it. Stalls, RSS and
outcomes are not checked here (tests/security asserts what a fixed coordinator must do): a
row whose attack succeeds is a finding of the benchmark, not a failure of it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "hostile.py"
# The attacks of the issue "Trust by default", each a row (some attacks have two).
ATTACKS = ("remote-ref", "file-ref", "redos", "bad-regex", "reg-flood-one", "reg-flood-many",
           "capture", "cross-caller", "slow-reader", "conn-flood", "submit-burst",
           "deep-nesting", "hostile-names", "heartbeat-values",
           # the issue "Fix first"
           "gzip-body", "rest-loris", "rest-hog", "letter-bytes", "huge-number")
QUICK_BOUND = 60.0  # seconds; 30 on a quiet 2-core machine (20 rows of 1.2-2.2 s), 46 under coverage
# Exceptions that would be a bug in the benchmark itself, never a coordinator's answer.
BENCH_BUGS = ("TypeError", "KeyError", "AttributeError", "AssertionError", "NameError",
              "IndexError", "UnboundLocalError", "JSONDecodeError")


def run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=timeout,
        cwd=ROOT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def table(stdout: str) -> list[list[str]]:
    """The table's rows as name, 7 numeric cells, then the outcome's words."""
    lines = stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:3] == ["attack", "worst", "ms"])
    for word in ("stall ms", "p50 ms", "calls", "fails", "peak RSS MB", "RSS +MB", "outcome"):
        assert word in lines[head], lines[head]
    rows = []
    for ln in lines[head + 2:]:
        if not ln.strip():
            break
        rows.append(ln.split())
    return rows


def numeric(cell: str) -> bool:
    return cell == "-" or cell.lstrip("+-").replace(".", "", 1).isdigit()


def test_hostile_bench_quick_reports_every_attack() -> None:
    started = time.monotonic()
    proc = run("--quick", timeout=QUICK_BOUND + 20)
    took = time.monotonic() - started
    rows = table(proc.stdout)
    names = [r[0] for r in rows]
    assert names[0] == "quiet", proc.stdout
    assert names[1:] == list(ATTACKS), proc.stdout
    for row in rows:
        assert len(row) >= 9, row  # name, 7 numbers, an outcome of one word or more
        assert all(numeric(c) for c in row[1:8]), row
        outcome = " ".join(row[8:])
        assert not any(f"{bug}:" in outcome for bug in BENCH_BUGS), row
    quiet = rows[0]
    assert quiet[1] != "-" and int(quiet[4]) > 10, "the baseline probe did not run"
    assert quiet[5] == "0", f"the probe failed with no attack running: {proc.stdout}"
    assert "total" in proc.stdout.splitlines()[-1]
    assert took < QUICK_BOUND, f"--quick took {took:.0f} s"


def test_hostile_bench_lists_its_rows_and_flags() -> None:
    out = run("--list", timeout=20).stdout
    assert [ln.split()[0] for ln in out.splitlines() if ln.strip()] == ["quiet", *ATTACKS]
    only = run("--list", "--only", "redos", timeout=20).stdout.split()
    assert only[0] == "quiet" and "redos" in only and "capture" not in only
    helptext = run("--help", timeout=20).stdout
    for flag in ("--quick", "--only", "--list", "--window", "--probe-timeout", "--log-dir"):
        assert flag in helptext, flag
    assert "--role" not in helptext  # the children's flag stays hidden


def test_make_bench_runs_the_hostile_bench() -> None:
    spec = importlib.util.spec_from_file_location("bench_all", ROOT / "bench" / "all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "bench/hostile.py" in [script for _, script, _ in module.BENCHES]
