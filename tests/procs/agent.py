"""A reach agent in its own process, for chaos tests (SIGSTOP, SIGKILL, coordinator crashes).

    python tests/procs/agent.py URL NAME [--log FILE] [--min-ms 5] [--max-ms 20]
                                [--max-concurrency 20] [--capability chaos.work]

Serves one idempotent capability ``chaos.work(n)`` that sleeps a random while and returns
``{"agent": NAME, "n": n, "pid": PID}``. Every handler run (an *execution*, not a duplicate
answered from the SDK's cache) appends ``KEY TASK_ID PID`` to ``--log`` with one unbuffered
``write`` on an O_APPEND descriptor, so the line survives a SIGKILL right after it.

Prints ``ready AGENT_ID`` on stdout once registered; exits on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
from pathlib import Path

# Run from a checkout without installing: make ``import reach`` find this repository.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from running import serve_until_stopped  # noqa: E402 - this folder's

from reach import Agent, Context  # noqa: E402


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("--log", default=None)
    parser.add_argument("--min-ms", type=float, default=5.0)
    parser.add_argument("--max-ms", type=float, default=20.0)
    parser.add_argument("--max-concurrency", type=int, default=20)
    parser.add_argument("--capability", default="chaos.work")
    return parser.parse_args()


async def main() -> None:
    args = _args()
    log_fd = (os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
              if args.log else None)
    pid = os.getpid()
    agent = Agent(args.name, max_concurrency=args.max_concurrency, reconnect_base=0.05,
                  reconnect_cap=0.5)

    @agent.capability(args.capability, params={"type": "object"}, idempotent=True,
                      latency_ms=max(100.0, args.max_ms * 5))
    async def work(n: int, ctx: Context) -> dict:
        if log_fd is not None:
            os.write(log_fd, f"{ctx.idempotency_key} {ctx.task_id} {pid}\n".encode())
        await asyncio.sleep(random.uniform(args.min_ms, args.max_ms) / 1000.0)
        return {"agent": args.name, "n": n, "pid": pid}

    await serve_until_stopped(agent, args.url)


if __name__ == "__main__":
    asyncio.run(main())
