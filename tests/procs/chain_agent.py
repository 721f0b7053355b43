"""A reach agent in its own process serving chain steps, for the chain crash drill.

    python tests/procs/chain_agent.py URL NAME --log FILE CAPABILITY [CAPABILITY ...]
                                      [--min-ms 20] [--max-ms 60]

Each capability is idempotent and takes ``{"n": int, "path": [names]}``: it sleeps a random
while and returns ``{"n": n + 1, "path": path + [CAPABILITY]}``, so a chain's last result
says which steps ran, in order. Every handler run (an execution, not a duplicate answered
from the SDK's idempotency cache) appends ``KEY TASK_ID CAPABILITY PID`` to ``--log`` with one
unbuffered ``write`` on an O_APPEND descriptor, so the line survives a SIGKILL right after.

Prints ``ready AGENT_ID`` once registered; exits on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
from pathlib import Path
from typing import Any

# Run from a checkout without installing: make ``import reach`` find this repository.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from running import serve_until_stopped  # noqa: E402 - this folder's

from reach import Agent, Context  # noqa: E402


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("capabilities", nargs="+")
    parser.add_argument("--log", required=True)
    parser.add_argument("--min-ms", type=float, default=20.0)
    parser.add_argument("--max-ms", type=float, default=60.0)
    return parser.parse_args()


async def main() -> None:
    args = _args()
    log_fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()
    agent = Agent(args.name, reconnect_base=0.05, reconnect_cap=0.5)

    def serve(capability: str) -> None:
        @agent.capability(capability, params={"type": "object"}, idempotent=True,
                          latency_ms=max(200.0, args.max_ms * 5))
        async def step(n: int, path: list[str], ctx: Context) -> dict[str, Any]:
            os.write(log_fd, f"{ctx.idempotency_key} {ctx.task_id} {capability} {pid}\n"
                     .encode())
            await asyncio.sleep(random.uniform(args.min_ms, args.max_ms) / 1000.0)
            return {"n": n + 1, "path": [*path, capability]}

    for capability in args.capabilities:
        serve(capability)
    await serve_until_stopped(agent, args.url)


if __name__ == "__main__":
    asyncio.run(main())
