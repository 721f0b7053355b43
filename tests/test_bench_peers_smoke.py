"""Smoke tests for the peers in the relay benchmark (Celery + Redis, NATS request-reply,
direct HTTP): at tiny sizes each prints its rows at 1 and 64 in flight, or — when its service
is not reachable on this machine — a clear skip line, and the run still succeeds. The second
test points both services at a closed port, so the skip path is always exercised. Numbers are
not checked."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "relay.py"
TINY = ("--quick", "--peers", "--no-matrix", "--calls", "64", "--calls-1", "10",
        "--warmup", "16")
# db 15, not the benchmark's default 14: a test run never flushes a manual run's queue.
REDIS = "redis://127.0.0.1:6379/15"
NATS = "nats://127.0.0.1:4222"


def reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def run(env: dict[str, str], *only: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(BENCH), *TINY, "--only", *only], capture_output=True, text=True,
        timeout=55, cwd=BENCH.parents[1], stdin=subprocess.DEVNULL,
        env={**os.environ, **env})
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def levels(stdout: str, name: str) -> set[str]:
    """The in-flight levels ``name`` has a row for in the main table."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["config", "in-flight"])
    found = set()
    for ln in lines[start + 2:]:
        if not ln.strip():
            break
        if ln.split()[0] == name:
            found.add(ln.split()[1])
    return found


def test_peers_print_rows_or_a_clear_skip() -> None:
    out = run({"REACH_BENCH_REDIS": REDIS, "REACH_BENCH_NATS": NATS},
              "raw-eager", "celery-redis", "nats-reqrep", "http-direct", "http-direct-split")
    assert levels(out, "raw-eager") == {"1", "64"}, out
    for name in ("http-direct", "http-direct-split"):  # needs no service
        assert levels(out, name) == {"1", "64"}, out
    for name, port, service in (("celery-redis", 6379, "Redis"),
                                ("nats-reqrep", 4222, "NATS")):
        if reachable(port):
            assert levels(out, name) == {"1", "64"}, out
        else:
            assert f"skip {name}: {service} not reachable" in out, out
    assert "targets against the peers" in out
    assert "CPU us per call" in out


def test_a_missing_service_is_skipped_not_faked() -> None:
    out = run({"REACH_BENCH_REDIS": "redis://127.0.0.1:1/15",
               "REACH_BENCH_NATS": "nats://127.0.0.1:1"},
              "raw-eager", "reach-memory", "celery-redis", "nats-reqrep")
    assert "skip celery-redis: Redis not reachable at redis://127.0.0.1:1/15" in out, out
    assert "skip nats-reqrep: NATS not reachable at nats://127.0.0.1:1" in out, out
    assert not levels(out, "celery-redis") and not levels(out, "nats-reqrep"), out
    assert levels(out, "reach-memory") == {"1", "64"}, out
    assert "SKIP" in out  # the peer targets say why they have no verdict
