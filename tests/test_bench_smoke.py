"""Smoke tests for the relay benchmark: ``bench/relay.py --quick`` runs end to end and prints
the table with the raw rows, both Reach rows and the quick matrix row, the targets and the CPU
table; ``--help`` explains every flag and ``--list`` names the rows. Numbers are not checked: a
miss is not a bug in the benchmark, and this machine is shared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "relay.py"


def run(*args: str, timeout: float = 50) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=timeout,
        cwd=BENCH.parents[1], stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def table_rows(stdout: str) -> list[list[str]]:
    """The rows of the main table: name, in-flight, calls/s, ... (up to the first blank)."""
    lines = stdout.splitlines()
    header = [ln for ln in lines if ln.split()[:2] == ["config", "in-flight"]]
    assert header, stdout
    for word in ("calls/s", "p50 ms", "p99 ms", "vs floor", "errors"):
        assert word in header[0]
    rows = []
    for ln in lines[lines.index(header[0]) + 2:]:
        if not ln.strip():
            break
        rows.append(ln.split())
    return rows


def test_relay_bench_quick_prints_the_table() -> None:
    proc = run("--quick")
    rows = table_rows(proc.stdout)
    names = {r[0] for r in rows if len(r) >= 5 and r[1] in ("1", "64")}
    assert {"raw", "raw-eager"} <= names, proc.stdout
    assert {"reach-sqlite-file", "reach-memory"} <= names, proc.stdout
    assert "reach-file-32ag-schema" in names, proc.stdout  # --quick keeps one matrix row
    for name in ("raw", "reach-sqlite-file", "reach-memory", "reach-file-32ag-schema"):
        assert {r[1] for r in rows if r and r[0] == name} >= {"1", "64"}, proc.stdout
    assert not names & {"celery-redis", "nats-reqrep", "http-direct"}, "peers need --peers"
    assert "targets (against the floor" in proc.stdout
    assert ("PASS" in proc.stdout) or ("MISS" in proc.stdout)
    assert "CPU us per call" in proc.stdout
    assert "setup:" in proc.stdout


def test_relay_bench_help_explains_every_flag() -> None:
    out = run("--help", timeout=20).stdout
    for flag in ("--peers", "--no-peers", "--matrix", "--no-matrix", "--only", "--list",
                 "--quick", "--calls", "--calls-1", "--rounds", "--warmup", "--batch-timeout",
                 "--latency-ms", "--celery-pool", "--celery-concurrency", "--verbose",
                 "--profile", "--profile-dir", "--profile-inflight", "--log-dir"):
        assert flag in out, flag
    assert "--store" not in out and "--responders" not in out  # internal flags stay hidden


def test_relay_bench_list_names_the_matrix_and_the_peers() -> None:
    out = run("--list", timeout=20).stdout
    names = [ln.split()[0] for ln in out.splitlines() if ln.strip()]
    assert names[:4] == ["raw", "raw-eager", "reach-sqlite-file", "reach-memory"]
    for name in ("reach-file-8ag", "reach-file-32ag", "reach-memory-32ag", "reach-file-schema",
                 "reach-file-32ag-schema", "celery-redis", "nats-reqrep", "http-direct"):
        assert name in names, out
    only = run("--list", "--only", "reach-file-*", timeout=20).stdout.split()
    assert "raw" in only and "reach-file-8ag" in only and "celery-redis" not in only


def test_relay_bench_profiles_the_one_in_flight_path_into_pstats(tmp_path: Path) -> None:
    import pstats

    proc = run("--quick", "--only", "reach-memory", "--no-matrix", "--profile", "cprofile",
               "--profile-inflight", "1", "--profile-dir", str(tmp_path))
    assert "profiled reach-memory @1" in proc.stdout, proc.stdout
    for role in ("caller", "coordinator", "agent"):
        base = tmp_path / f"profile-reach-memory-1-{role}-cprofile"
        assert "process CPU time while profiled" in (base.with_suffix(".txt")).read_text()
        stats = pstats.Stats(str(base.with_suffix(".pstats")))
        assert stats.total_calls > 0  # type: ignore[attr-defined]
