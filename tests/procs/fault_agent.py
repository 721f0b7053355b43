"""A reach agent in its own process that injects faults, for failure drills and the soak.

    python tests/procs/fault_agent.py URL NAME [--log FILE] [--min-ms 2] [--max-ms 10]
                                     [--max-concurrency 32] [--fault-rate 0.0] [--seed 0]
                                     [--latency-ms 200] [--connect-for 30]
                                     [--hog-ms 0 --hog-every-ms 300]

Serves two capabilities with the same handler:

- ``soak.read(n)``  idempotent: faults and lost attempts are retried by the coordinator;
- ``soak.write(n)`` not idempotent: a fault or a lost attempt after the ack is final.

Each returns ``{"agent": NAME, "n": n, "pid": PID}`` after a random sleep. A seeded share
(``--fault-rate``) of runs raises a plain ``RuntimeError`` (an agent fault, not a ``TaskError``
answer): whether a run faults is decided by ``(seed, key, attempt)``, so a retry draws again
and a re-run of a whole scenario faults the same attempts.

Every run writes lines ``KIND KEY TASK_ID ATTEMPT PID`` to ``--log`` (``start`` when the
handler begins, then ``done`` or ``fault``), each with one unbuffered ``write`` on an O_APPEND
descriptor, so several processes can share one log and a line survives a SIGKILL right after.
Duplicates answered from the SDK's idempotency cache never reach the handler and write nothing.

``--hog-ms`` blocks this process's event loop that long every ``--hog-every-ms`` (a CPU-bound
neighbour in the agent's loop): frames arriving meanwhile are read, and acknowledged, late.

Prints ``ready AGENT_ID`` once registered (a first connection refused is tried again for
``--connect-for`` seconds); exits on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
import time
from pathlib import Path

# Run from a checkout without installing: make ``import reach`` find this repository.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from reach import Agent, Context, Unavailable  # noqa: E402


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("--log", default=None)
    parser.add_argument("--min-ms", type=float, default=2.0)
    parser.add_argument("--max-ms", type=float, default=10.0)
    parser.add_argument("--max-concurrency", type=int, default=32)
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--connect-for", type=float, default=30.0)
    parser.add_argument("--hog-ms", type=float, default=0.0)
    parser.add_argument("--hog-every-ms", type=float, default=300.0)
    return parser.parse_args()


def faults(seed: int, key: str, attempt: int, rate: float) -> bool:
    return rate > 0 and random.Random(f"{seed}:{key}:{attempt}").random() < rate


async def main() -> None:
    args = _args()
    log_fd = (os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
              if args.log else None)
    pid = os.getpid()

    def note(kind: str, ctx: Context) -> None:
        if log_fd is not None:
            os.write(log_fd, f"{kind} {ctx.idempotency_key} {ctx.task_id} {ctx.attempt} "
                             f"{pid}\n".encode())

    agent = Agent(args.name, max_concurrency=args.max_concurrency, reconnect_base=0.05,
                  reconnect_cap=0.5)

    async def work(n: int, ctx: Context) -> dict:
        note("start", ctx)
        await asyncio.sleep(random.uniform(args.min_ms, args.max_ms) / 1000.0)
        if faults(args.seed, ctx.idempotency_key, ctx.attempt, args.fault_rate):
            note("fault", ctx)
            raise RuntimeError(f"injected fault (attempt {ctx.attempt})")
        note("done", ctx)
        return {"agent": args.name, "n": n, "pid": pid}

    agent.capability("soak.read", params={"type": "object"}, idempotent=True,
                     latency_ms=args.latency_ms)(work)
    agent.capability("soak.write", params={"type": "object"}, idempotent=False,
                     scope="write", latency_ms=args.latency_ms)(work)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Started while the coordinator is down (it is being restarted too): keep trying, as a
    # supervisor restarting this process would. Once connected, the SDK reconnects by itself.
    give_up = loop.time() + args.connect_for
    while True:
        try:
            await agent.connect(args.url)
            break
        except Unavailable:
            if loop.time() > give_up:
                raise
            await asyncio.sleep(0.1)
    print(f"ready {agent.agent_id}", flush=True)
    hog = loop.create_task(_hog(args.hog_ms, args.hog_every_ms)) if args.hog_ms > 0 else None
    try:
        await stop.wait()
    finally:
        if hog is not None:
            hog.cancel()
        await agent.close(drain=1.0)


async def _hog(block_ms: float, every_ms: float) -> None:
    while True:
        await asyncio.sleep(every_ms / 1000.0)
        time.sleep(block_ms / 1000.0)  # on purpose: the loop is busy, nothing is read


if __name__ == "__main__":
    asyncio.run(main())
