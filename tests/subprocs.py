"""Real subprocesses for chaos tests and failure drills: start, watch output, SIGKILL.

Shared by tests/test_chaos.py and tests/drills/ (tests/conftest.py turns ``spawner`` into the
``spawn`` fixture). A process's stdout and stderr go to a file that is polled, so waiting for
a line never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from reach import Reach

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """A subprocess whose stdout+stderr go to a file we can poll without blocking the loop."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], out: Path) -> None:
        self.name, self.popen, self.out = name, popen, out

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        try:
            return self.out.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    async def wait_for(self, marker: str, timeout: float = 20.0) -> str:
        """The first output line containing ``marker``; fails fast if the process died."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.output().splitlines():
                if marker in line:
                    return line
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.name} exited ({self.popen.returncode}) before "
                                     f"printing {marker!r}:\n{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} printed no {marker!r} within {timeout}s:\n"
                                     f"{self.output()[-3000:]}")
            await asyncio.sleep(0.02)

    def send(self, sig: int) -> None:
        os.kill(self.popen.pid, sig)

    def kill9(self) -> None:
        """SIGKILL and reap (the kernel closes its sockets at once)."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)

    def reap(self) -> None:
        if self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, signal.SIGCONT)  # a stopped process still dies on KILL
            except ProcessLookupError:
                pass
            self.popen.kill()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - nothing more we can do
            pass


def spawner(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """The ``spawn`` fixture: ``spawn(name, *argv)`` runs ``python *argv``; every process is
    SIGKILLed at teardown."""
    procs: list[Proc] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                       os.environ.get("PYTHONPATH")]))}

    def start(name: str, *argv: Any) -> Proc:
        out = tmp_path / f"{name}.out"
        with open(out, "ab") as fh:
            popen = subprocess.Popen([sys.executable, *map(str, argv)], stdout=fh,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=REPO, env=env)
        proc = Proc(name, popen, out)
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            proc.reap()


def start_coordinator(spawn: Callable[..., Proc], name: str, port: int, db: Path,
                      *options: Any) -> Proc:
    return spawn(name, "-m", "reach.cli", "serve", "--port", port, "--store", f"sqlite:///{db}",
                 "--heartbeat-interval", "0.05", "--recovery-grace", "5",
                 "--log-level", "WARNING", *options)


def agent_view(reach: Reach, name: str) -> dict[str, Any] | None:
    return next((a for a in reach.agents() if a["name"] == name), None)
