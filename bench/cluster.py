"""Several coordinators on one PostgreSQL, against one on SQLite, in one run (issue 15).

    python bench/cluster.py [--quick] [--url postgresql://postgres@127.0.0.1/postgres]

Every coordinator is a real ``reach serve`` subprocess. The bench creates a fresh database on
the server given by ``--url`` and drops it at the end. The agents and callers are in this
process, one echo agent and one caller per coordinator, and the calls are spread over the
callers in turn. The router decides which agent serves each call, so a call may cross a peer
link.

1. The baseline: one ``reach serve --store sqlite:///FILE``, with the same agent, caller and
   load as the rest. It is measured first and again after the PostgreSQL stages (idle in
   between); the baseline is the mean of the two, and both are printed to show the drift.
2. One, then two, then three ``reach serve --store postgresql://... --cluster`` on the one
   database. Each stage adds a node, with its agent and caller, to the nodes already up.
   Printed for each: calls/s with ``--inflight`` calls in flight, and p50 and p95 with one
   call at a time. Both ratios are against the SQLite baseline.
3. The cross-node hop: a capability whose only agent is on node B, called one at a time by
   the caller on B (direct) and by the caller on A (through the peer link A → B), one call
   of each in turn.
4. Fail-over: an agent given every node's URL lands on one of them. Tasks submitted on that
   node are started at the agent, and then that node is SIGKILLed. Printed: the time until
   the agent is registered elsewhere, the time until the first and the last of those tasks
   is completed elsewhere (read by a caller on a survivor), and how many completed.

On a 2-core machine, three coordinators, PostgreSQL and this process share the same two
cores. More nodes cannot show a speed-up here; the numbers show what the cluster costs.
docs/cluster.md models the many-machine case.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reach import Agent, Client  # noqa: E402

LEASE = 1.5  # seconds; reach serve's default is 5
HEARTBEAT = 0.2  # seconds between agents' heartbeats (each coordinator's setting)
ADMIN = "bench"  # one admin token on every node: it is also their peer token


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Coordinator:
    """One ``reach serve`` subprocess. Its output goes to a file, polled without blocking."""

    def __init__(self, name: str, store: str, work: Path, cluster: bool) -> None:
        self.name, self.port = name, free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        self.out = work / f"{name}.out"
        argv = [sys.executable, "-m", "reach.cli", "serve", "--port", str(self.port),
                "--store", store, "--no-http", "--admin-token", ADMIN,
                "--heartbeat-interval", str(HEARTBEAT), "--log-level", "WARNING"]
        if cluster:
            argv += ["--cluster", "--lease", str(LEASE)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                           os.environ.get("PYTHONPATH")]))}
        with open(self.out, "ab") as fh:
            self.popen = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, cwd=REPO, env=env)

    async def ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while "coordinator listening on" not in self.out.read_text(errors="replace"):
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start:\n"
                                   f"{self.out.read_text(errors='replace')[-2000:]}")
            await asyncio.sleep(0.05)

    def kill9(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM (a graceful stop: the node leaves the cluster), SIGKILL after 10 s."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()


def echo_agent(name: str, capability: str = "bench.echo") -> Agent:
    agent = Agent(name, max_concurrency=256)

    @agent.capability(capability, idempotent=True, latency_ms=50)
    async def echo(n: int) -> int:
        return n

    return agent


async def until_callable(client: Client, capability: str, limit: float = 20.0) -> None:
    """Call until one call succeeds: the node has linked to its peers and mirrors their
    agents (discovery runs every lease_s / 3)."""
    deadline = time.monotonic() + limit
    while True:
        try:
            await client.call(capability, {"n": 0}, timeout=5)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def rate(clients: list[Client], calls: int, inflight: int) -> float:
    """calls/s with ``inflight`` calls in flight, spread over ``clients`` in turn."""
    left = iter(range(calls))

    async def worker(client: Client) -> None:
        for i in left:
            await client.call("bench.echo", {"n": i}, timeout=30)

    start = time.perf_counter()
    await asyncio.gather(*(worker(clients[w % len(clients)]) for w in range(inflight)))
    return calls / (time.perf_counter() - start)


async def one_at_a_time(clients: list[Client], calls: int, capability: str = "bench.echo"
                        ) -> list[float]:
    took = []
    for i in range(calls):
        start = time.perf_counter()
        await clients[i % len(clients)].call(capability, {"n": i}, timeout=30)
        took.append(time.perf_counter() - start)
    return took


class Load:
    """The agents and callers of one topology (one of each per coordinator)."""

    def __init__(self) -> None:
        self.agents: list[Agent] = []
        self.clients: list[Client] = []

    async def add(self, node: Coordinator) -> Client:
        agent = echo_agent(f"echo-{node.name}")
        await agent.connect(node.url)
        self.agents.append(agent)
        client = await Client.connect(node.url, caller="bench")
        self.clients.append(client)
        return client

    async def measure(self, calls: int, sequential: int, inflight: int) -> dict[str, float]:
        for client in self.clients:  # every node routes (to someone) before timing
            await until_callable(client, "bench.echo")
        await one_at_a_time(self.clients, 20)
        took = await one_at_a_time(self.clients, sequential)
        per_s = await rate(self.clients, calls, inflight)
        return {"rate": per_s, "p50": pct(took, 0.5) * 1000, "p95": pct(took, 0.95) * 1000}

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        for agent in self.agents:
            await agent.close()


def row(label: str, m: dict[str, float], base: dict[str, float]) -> str:
    return (f"  {label:<22} {m['rate']:>8,.0f} {m['rate'] / base['rate']:>6.2f}x "
            f"{m['p50']:>8.2f} {m['p50'] / base['p50']:>6.2f}x {m['p95']:>8.2f}")


async def hop(a: Client, b: Client, node_b: Coordinator, calls: int
              ) -> tuple[list[float], list[float], Agent]:
    """A capability whose one agent is on B: callers on B (direct) and on A (hop)."""
    agent = echo_agent("hop-target", "bench.hop")
    await agent.connect(node_b.url)
    await until_callable(a, "bench.hop")
    await until_callable(b, "bench.hop")
    direct: list[float] = []
    through: list[float] = []
    for i in range(calls):  # call by call in turn: both paths see the same moment's machine
        first, second = ((b, direct), (a, through)) if i % 2 else ((a, through), (b, direct))
        for client, into in (first, second):
            start = time.perf_counter()
            await client.call("bench.hop", {"n": i}, timeout=30)
            into.append(time.perf_counter() - start)
    return direct, through, agent


async def failover(nodes: list[Coordinator], tasks: int) -> dict[str, Any]:
    """SIGKILL the node an agent is on, while that node owns tasks the agent is running."""
    gate = asyncio.Event()
    started: list[int] = []
    agent = Agent("failover-target", max_concurrency=256)

    @agent.capability("bench.held", idempotent=True, latency_ms=5000)
    async def held(n: int) -> int:
        started.append(n)
        await gate.wait()
        return n

    await agent.connect([n.url for n in nodes])  # it picks one at random
    victim = next(n for n in nodes if n.url == agent.url)
    survivor = next(n for n in nodes if n is not victim)
    on_victim = await Client.connect(victim.url, caller="bench")
    on_survivor = await Client.connect(survivor.url, caller="bench")
    try:
        handles = [await on_victim.submit("bench.held", {"n": i}, idempotency_key=f"f-{i}")
                   for i in range(tasks)]
        deadline = time.monotonic() + 20
        while len(started) < tasks and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        killed = time.perf_counter()
        victim.kill9()
        gate.set()  # the runs end with nobody to tell: the results must come another way
        done: list[float] = []

        async def follow(task_id: str) -> None:
            await on_survivor.result(task_id, timeout=30)
            done.append(time.perf_counter() - killed)

        async def moved() -> float:
            while agent.url == victim.url:
                await asyncio.sleep(0.005)
            return time.perf_counter() - killed

        moved_task = asyncio.ensure_future(moved())
        results = await asyncio.gather(*(follow(h.task_id) for h in handles),
                                       return_exceptions=True)
        reconnect = await asyncio.wait_for(moved_task, 30)
        errors = [r for r in results if isinstance(r, BaseException)]
        takers = [n.name for n in nodes if n is not victim
                  and "took over" in n.out.read_text(errors="replace")]
        return {"victim": victim.name, "reconnect": reconnect, "done": sorted(done),
                "errors": errors, "runs": len(started), "takers": takers,
                "asked": survivor.name}
    finally:
        await on_survivor.close()
        await agent.close()
        await asyncio.wait_for(on_victim.close(), 5)


def admin_connect(url: str) -> Any:
    import psycopg  # the postgres extra; imported here so --help works without it

    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def scratch_url(admin_url: str, name: str) -> str:
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


async def main(args: argparse.Namespace) -> int:
    quick = args.quick
    calls, sequential, inflight = (150, 40, 16) if quick else (1500, 300, 32)
    hop_calls, held = (40, 4) if quick else (400, 16)
    scratch = f"reach_bench_{secrets.token_hex(4)}"
    try:
        with admin_connect(args.url) as admin:
            admin.execute(f'CREATE DATABASE "{scratch}"')
    except Exception as exc:  # no driver (ImportError), no server, no rights
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"bench/cluster.py needs a PostgreSQL server it may create a database on "
              f"({args.url}): {first}; start one, or pass --url", file=sys.stderr)
        return 2
    pg = scratch_url(args.url, scratch)
    work = Path(tempfile.mkdtemp(prefix="reach-cluster-bench-"))
    procs: list[Coordinator] = []
    print(f"every coordinator a `reach serve` subprocess; lease {LEASE} s, agents' heartbeat "
          f"{HEARTBEAT} s; {os.cpu_count()} cpu shared by all of them, PostgreSQL and this "
          f"process (agents and callers); load average {os.getloadavg()[0]:.1f} at start")
    try:
        sqlite = Coordinator("sqlite", f"sqlite:///{work / 'base.db'}", work, cluster=False)
        procs.append(sqlite)
        await sqlite.ready()
        baseline = Load()  # kept up (idle) and measured again after the PostgreSQL stages
        await baseline.add(sqlite)
        before = await baseline.measure(calls, sequential, inflight)

        results: list[tuple[str, dict[str, float]]] = []
        load = Load()
        nodes: list[Coordinator] = []
        for n in (1, 2, 3):
            node = Coordinator(f"node-{n}", pg, work, cluster=True)
            procs.append(node)
            nodes.append(node)
            await node.ready()
            await load.add(node)
            results.append((f"{n} on PostgreSQL", await load.measure(calls, sequential,
                                                                     inflight)))
        after = await baseline.measure(calls, sequential, inflight)
        await baseline.close()
        sqlite.stop()
        base = {k: (before[k] + after[k]) / 2 for k in before}
        print(f"\n### 1. calls: {calls} with {inflight} in flight, {sequential} one at a time, "
              f"spread over one caller per coordinator")
        print(f"  {'coordinators':<22} {'calls/s':>8} {'ratio':>7} {'p50 ms':>8} {'ratio':>7} "
              f"{'p95 ms':>8}")
        print(row("1 on SQLite (baseline)", base, base))
        print(row("  SQLite, first", before, base))
        print(row("  SQLite, last", after, base))
        for label, m in results:
            print(row(label, m, base))

        direct, through, hop_agent = await hop(load.clients[0], load.clients[1], nodes[1],
                                               hop_calls)
        d50, h50 = pct(direct, 0.5) * 1000, pct(through, 0.5) * 1000
        print(f"\n### 2. the cross-node hop: {len(direct)} calls per path, one at a time, "
              f"alternating, the only agent on node-2")
        print(f"  direct  caller on node-2 -> agent on node-2   p50 {d50:7.2f} ms   "
              f"p95 {pct(direct, 0.95) * 1000:7.2f} ms")
        print(f"  hop     caller on node-1 -> agent on node-2   p50 {h50:7.2f} ms   "
              f"p95 {pct(through, 0.95) * 1000:7.2f} ms")
        print(f"  the hop adds {h50 - d50:.2f} ms at p50 (ratio {h50 / d50:.2f})")
        await hop_agent.close()
        await load.close()

        f = await failover(nodes, held)
        print(f"\n### 3. fail-over: SIGKILL of the coordinator holding an agent and owning "
              f"{held} tasks it had started (lease {LEASE} s, renewed and polled every "
              f"{LEASE / 3:.1f} s)")
        print(f"  killed {f['victim']}; the agent registered with another node after "
              f"{f['reconnect']:.2f} s")
        if f["done"]:
            print(f"  first task completed elsewhere after {f['done'][0]:.2f} s, last after "
                  f"{f['done'][-1]:.2f} s; {len(f['done'])} of {held} completed, "
                  f"{len(f['errors'])} failed (read by a caller on {f['asked']})")
            print(f"  taken over by {', '.join(f['takers']) or 'nobody?'}; the agent ran "
                  f"{f['runs']} times for {held} tasks (its key cache answers a repeat)")
        else:
            print(f"  no task completed elsewhere: {f['errors'][:1]}")
        return 0 if not f["errors"] else 1
    finally:
        for proc in procs:
            proc.kill9()
        with admin_connect(args.url) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes: numbers mean little")
    parser.add_argument("--url", default=os.environ.get(
        "REACH_PG_URL", "postgresql://postgres@127.0.0.1/postgres"),
        help="a PostgreSQL server to create the scratch database on (admin rights)")
    sys.exit(asyncio.run(main(parser.parse_args())))
