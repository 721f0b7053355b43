"""One run of a command for one call (``ProcessAgent`` in per-call mode), and the end of a
process group, shared with the stdio mode.

The command is started in a session of its own (``start_new_session``), so it leads a process
group holding everything it starts: ending the call — done, timed out, cancelled, or over its
output bound — signals the whole group, SIGTERM then SIGKILL after a grace, grandchildren
included. The command itself is a child of the coordinator and is reaped by asyncio's child
watcher; what it started is reparented to init, which reaps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

from reach.adapters.base import Undelivered

TAIL = 2048  # bytes of stderr kept for an error message
CHUNK = 1 << 16


class Overflow(Exception):  # noqa: N818
    """The command printed more than the bound on stdout (it was stopped)."""


@dataclass(slots=True)
class Finished:
    """What a command left behind: its exit status, its stdout and the tail of its stderr."""

    code: int
    stdout: bytes
    stderr_tail: bytes


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to every process of the group; an empty group is already ended."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def end_group(proc: asyncio.subprocess.Process, grace: float) -> None:
    """End the process and everything it started: SIGTERM to the group, ``grace`` seconds for
    the leader to exit, then SIGKILL to the group (whatever ignored SIGTERM, or outlived its
    parent). Cancelling this still sends the SIGKILL."""
    if proc.returncode is None:
        signal_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            pass
        finally:
            signal_group(proc.pid, signal.SIGKILL)
        await proc.wait()  # reaped (asyncio's child watcher); leaves no zombie of ours
    else:
        signal_group(proc.pid, signal.SIGKILL)  # what it left running in its group


def release(proc: asyncio.subprocess.Process) -> None:
    """Close the process's pipes once nothing more is read from them. A pipe whose reading
    stopped early (a reply over the bound, a child holding it open) would otherwise stay open
    until the garbage collector finds it."""
    transport = getattr(proc, "_transport", None)  # asyncio keeps no public handle on it
    if transport is not None:  # pragma: no branch — CPython's Process always has one
        transport.close()


async def _collect(stream: asyncio.StreamReader, bound: int) -> bytes:
    data = bytearray()
    while chunk := await stream.read(CHUNK):
        data += chunk
        if len(data) > bound:
            raise Overflow(f"printed more than {bound} bytes on stdout")
    return bytes(data)


async def _tail(stream: asyncio.StreamReader, keep: bytearray) -> None:
    while chunk := await stream.read(CHUNK):
        keep += chunk
        if len(keep) > TAIL:
            del keep[:-TAIL]


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> None:
    # A command that exits without reading all of its input is not a fault of the call.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data)
        await stream.drain()
        stream.close()
        await stream.wait_closed()


async def _exit_code(proc: asyncio.subprocess.Process) -> int:
    """The command's exit status, as soon as it exits. ``Process.wait()`` alone returns only
    once its pipes are closed too, which a process the command left running may hold open for
    ever: the status is polled meanwhile (the normal exit, pipes closed, returns at once)."""
    waiter = asyncio.ensure_future(proc.wait())
    try:
        poll = 0.005
        while proc.returncode is None:
            await asyncio.wait([waiter], timeout=poll)
            poll = min(poll * 2, 0.1)
        return proc.returncode
    finally:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)


async def run(program: str, args: list[str], *, stdin: bytes | None, env: dict[str, str],
              cwd: str | None, max_output: int, grace: float,
              popen: dict[str, Any] | None = None) -> Finished:
    """Run the command to its end and return what it printed. Raises ``Undelivered`` when it
    could not be started (nothing ran), ``Overflow`` past ``max_output`` bytes of stdout.
    However it ends (cancelled included), its process group is ended before this returns.
    ``popen``: more keywords for the start (``user``/``group``: process_user.RunAs)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            program, *args, stdin=asyncio.subprocess.PIPE if stdin is not None
            else asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd, start_new_session=True,
            **(popen or {}))
    except (OSError, subprocess.SubprocessError) as exc:
        raise Undelivered(f"could not start {program!r}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    assert proc.stdout is not None and proc.stderr is not None
    err = bytearray()
    out = asyncio.ensure_future(_collect(proc.stdout, max_output))
    helpers = [asyncio.ensure_future(_tail(proc.stderr, err))]
    if stdin is not None:
        assert proc.stdin is not None
        helpers.append(asyncio.ensure_future(_feed(proc.stdin, stdin)))
    exited = asyncio.ensure_future(_exit_code(proc))
    try:
        await asyncio.wait([exited, out], return_when=asyncio.FIRST_COMPLETED)
        if out.done():
            out.result()  # raises Overflow when it stopped reading at the bound
            await exited  # stdout ended first: the exit is next
        # Exited; the pipes close once nothing holds them. A process it left behind may hold
        # them open: give it the grace, then the group is ended (finally) and what was read
        # is what it printed.
        await asyncio.wait([out, *helpers], timeout=grace)
        code = exited.result()
        if not out.done():
            signal_group(proc.pid, signal.SIGKILL)
            await asyncio.wait([out], timeout=grace)
        stdout = out.result() if out.done() else b""
        return Finished(code, stdout, bytes(err))
    finally:
        for task in (out, exited, *helpers):
            task.cancel()
        try:
            await end_group(proc, grace)
        finally:
            release(proc)
            await asyncio.gather(out, exited, *helpers, return_exceptions=True)
