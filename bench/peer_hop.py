"""The cross-node hop: what a peer link adds to a call, measured in one run.

Two coordinators (A, B) linked as peers, each with its own in-memory store, and one echo
agent connected to B. The same calls are made by a caller on B (direct: caller → B → agent)
and by a caller on A (hop: caller → A → peer link → B → agent), one at a time and then many
in flight, interleaved in rounds so both see the same machine. Printed: p50 and p95 of each,
the hop's added p50 and the ratio, and calls/s with ``--inflight`` calls in flight.

Everything runs in one process on one event loop (the agent, both coordinators and both
callers): the numbers are the CPU cost of the extra frames and the second coordinator's
work, not network latency. Between machines add one round trip of the network between A and
B to the hop's p50.

    python bench/peer_hop.py [--calls 2000] [--inflight 32] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from reach import Agent, Client, Reach

OPTIONS = dict(heartbeat_interval=1.0, peer_token="bench", http_port=None, warmup=0.0)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def sequential(client: Client, calls: int) -> list[float]:
    took = []
    for i in range(calls):
        start = time.perf_counter()
        await client.call("bench.echo", {"n": i}, timeout=10)
        took.append(time.perf_counter() - start)
    return took


async def parallel(client: Client, calls: int, inflight: int) -> float:
    """calls/s with ``inflight`` calls in flight."""
    left = iter(range(calls))

    async def worker() -> None:
        for i in left:
            await client.call("bench.echo", {"n": i}, timeout=10)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    return calls / (time.perf_counter() - start)


async def main(calls: int, inflight: int, rounds: int) -> None:
    async with Reach.start(node_id="A", **OPTIONS) as a, \
            Reach.start(node_id="B", **OPTIONS) as b:
        agent = Agent("bench-echo", max_concurrency=max(64, inflight * 2))

        @agent.capability("bench.echo", idempotent=True, latency_ms=50)
        async def echo(n: int) -> int:
            return n

        async with agent.connect(b.url):
            await a.peers.add("B", b.url)
            await a.peers.synced("B")
            async with Client.connect(a.url, caller="bench") as on_a, \
                    Client.connect(b.url, caller="bench") as on_b:
                await sequential(on_a, 50)  # warm both paths
                await sequential(on_b, 50)
                hop: list[float] = []
                direct: list[float] = []
                rate_hop: list[float] = []
                rate_direct: list[float] = []
                per = max(1, calls // rounds)
                for _ in range(rounds):
                    direct += await sequential(on_b, per)
                    hop += await sequential(on_a, per)
                    rate_direct.append(await parallel(on_b, per, inflight))
                    rate_hop.append(await parallel(on_a, per, inflight))
    d50, h50 = pct(direct, 0.5) * 1000, pct(hop, 0.5) * 1000
    print(f"calls: {len(direct)} per path, one at a time, in {rounds} interleaved rounds")
    print(f"  direct  caller on B -> agent on B   p50 {d50:7.3f} ms   "
          f"p95 {pct(direct, 0.95) * 1000:7.3f} ms")
    print(f"  hop     caller on A -> agent on B   p50 {h50:7.3f} ms   "
          f"p95 {pct(hop, 0.95) * 1000:7.3f} ms")
    print(f"  the hop adds {h50 - d50:.3f} ms at p50 (ratio {h50 / d50:.2f})")
    print(f"calls/s with {inflight} in flight: direct {statistics.median(rate_direct):,.0f}, "
          f"hop {statistics.median(rate_hop):,.0f} "
          f"(ratio {statistics.median(rate_hop) / statistics.median(rate_direct):.2f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.inflight, args.rounds))
