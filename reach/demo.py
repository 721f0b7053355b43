"""``reach demo``: a coordinator on an embedded SQLite file, three websocket agents from the field,
a REST service and a command-line tool attached as they are (reach.demo_adapters), a caller
sending a mix of calls (some of which fail on purpose), and a live table — then one dead letter
(an invoice whose payment gateway was down) replayed once the agent is fixed, and a clean exit."""

from __future__ import annotations

import asyncio
import logging
import random
import tempfile
import time
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from reach import demo_adapters
from reach.errors import ReachError, TaskError
from reach.reach import Reach
from reach.sdk.agent import Agent
from reach.sdk.client import Client
from reach.sdk.context import Context

STATE_STYLE = {"online": "green", "suspected": "yellow", "offline": "red", "drained": "cyan"}
OUTCOME_STYLE = {"ok": "green", "task_failed": "red", "invalid_params": "magenta",
                 "no_route": "magenta", "timeout": "yellow", "rejected": "yellow"}


class SalesQuery(BaseModel):
    region: str
    quarter: str


class StockQuery(BaseModel):
    sku: str


def build_agents(rng: random.Random) -> list[Agent]:
    """The three agents of the demo: sales analysis, a slow report writer, inventory."""
    sales = Agent("order-analysis", max_concurrency=20)

    @sales.capability("sales.query", params=SalesQuery, latency_ms=200, weight=80,
                      idempotent=True, intents=["查一下销售额", "sales figures"])
    async def query_sales(region: str, quarter: str) -> dict[str, Any]:
        """Sales figures for a region and quarter."""
        await asyncio.sleep(rng.uniform(0.01, 0.06))
        return {"region": region, "quarter": quarter, "revenue": rng.randint(100, 999) * 1000}

    writer = Agent("report-writer", max_concurrency=4)

    @writer.capability("report.generate", params={"type": "object", "properties": {
        "region": {"type": "string"}}, "required": ["region"]}, latency_ms=1500,
        idempotent=True, intents=["write a report"])
    async def generate(region: str, ctx: Context) -> str:
        """A quarterly report; asks sales.query for its numbers (same trace)."""
        figures = await ctx.call("sales.query", {"region": region, "quarter": "Q3"})
        await asyncio.sleep(rng.uniform(0.4, 1.0))
        return f"Q3 report for {region}: revenue {figures['revenue']:,}"

    stock = Agent("inventory", max_concurrency=10)

    @stock.capability("stock.query", params=StockQuery, latency_ms=100, idempotent=True,
                      intents=["库存", "how many in stock"])
    async def query_stock(sku: str) -> dict[str, Any]:
        """Units in stock for a SKU."""
        await asyncio.sleep(rng.uniform(0.005, 0.03))
        if sku == "SKU-404":
            raise TaskError(f"unknown SKU {sku}")
        if rng.random() < 0.1:  # a transient fault: the gateway retries idempotent reads
            raise ConnectionError("inventory DB connection reset")
        return {"sku": sku, "units": rng.randint(0, 500)}

    return [sales, writer, stock]


class Billing:
    """The dead-letter story's agent: ``invoice.send`` while its payment gateway is down fails
    with a fault; not idempotent (an invoice must not go out twice), so the coordinator does
    not retry it and keeps the task as a dead letter for an operator to replay once fixed."""

    def __init__(self) -> None:
        self.down = True
        self.agent = Agent("billing", max_concurrency=4)

        @self.agent.capability("invoice.send", params={"type": "object", "properties": {
            "order": {"type": "string"}}, "required": ["order"]}, latency_ms=50)
        async def send(order: str) -> dict[str, Any]:
            """Send the invoice of an order through the payment gateway."""
            if self.down:
                raise ConnectionError("payment gateway unreachable")
            return {"order": order, "invoice": f"INV-{order.rsplit('-', 1)[-1]}", "sent": True}


async def dead_letter_story(reach: Reach, client: Client, billing: Billing) -> list[str]:
    """One call dead-letters (its agent faults), the agent is fixed, ``reach.replay`` runs the
    letter again and it succeeds: the lines the summary prints about it."""
    handle = await client.submit("invoice.send", {"order": "A-1042"})
    try:
        await handle.result(timeout=5)
    except ReachError:
        pass  # expected: the letter below is what an operator sees of it
    letter = reach.dead_letter(handle.task_id)
    if letter is None:  # pragma: no cover - the call did not die: nothing to tell
        return []
    short = handle.task_id[:10]
    error = (letter.get("error") or {}).get("message", "?")
    tries = len(letter["attempts"])
    lines = [f"dead letters: {len(reach.dead_letters())}",
             f"  invoice.send {short}…: {error} ({tries} attempt{'' if tries == 1 else 's'}; "
             f"not idempotent, so not retried)"]
    billing.down = False  # the payment gateway is back
    view = await reach.replay(handle.task_id, wait=5)
    lines.append(f"  the gateway is back; await reach.replay(id): {view['state']} → "
                 f"{view['result']}")
    lines.append(f"dead letters after the replay: {len(reach.dead_letters())}")
    return lines


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("sales.query", {"region": "east", "quarter": "Q3"}),
    ("sales.query", {"region": "west", "quarter": "Q2"}),
    ("stock.query", {"sku": "SKU-1"}),
    ("stock.query", {"sku": "SKU-2"}),
    ("report.generate", {"region": "east"}),
    ("stock.query", {"sku": "SKU-404"}),          # fails on purpose: a TaskError answer
    ("sales.query", {"region": "east"}),          # invalid params: no quarter
    ("sales.querry", {"region": "east"}),         # no such capability: suggestions
    *demo_adapters.CALLS,                         # a REST service and a command-line tool
]


class Board:
    """What the live view shows: recent outcomes and totals."""

    def __init__(self) -> None:
        self.recent: deque[tuple[str, str, float, str]] = deque(maxlen=10)
        self.totals: Counter[str] = Counter()
        self.report_trace: str | None = None
        self.logs: deque[str] = deque(maxlen=3)  # the library's latest log lines, newest first
        self.logged = 0
        self.letter: list[str] = []  # the dead-letter story, told after the traffic

    def add(self, capability: str, outcome: str, ms: float, detail: str) -> None:
        self.recent.appendleft((capability, outcome, ms, detail))
        self.totals[outcome] += 1


def render(reach: Reach, board: Board, left: float, db: Path) -> Group:
    agents = Table(title="agents", expand=True)
    for col in ("name", "kind", "state", "in-flight", "calls", "faults", "breaker",
                "capabilities"):
        agents.add_column(col, no_wrap=col in ("name", "kind", "state"))
    for a in reach.agents():
        agents.add_row(a["name"], a["kind"], f"[{STATE_STYLE[a['state']]}]{a['state']}[/]",
                       f"{a['inflight']}/{a['max_concurrency']}", str(a["calls"]),
                       str(a["faults"]), a["breaker"], ", ".join(a["capabilities"]))
    tasks = Table(title="recent calls", expand=True)
    for col in ("capability", "outcome", "ms", "detail"):  # the detail takes the room left
        tasks.add_column(col, no_wrap=True, overflow="ellipsis", ratio=1 if col == "detail"
                         else None)
    for cap, outcome, ms, detail in board.recent:
        tasks.add_row(cap, f"[{OUTCOME_STYLE.get(outcome, 'white')}]{outcome}[/]",
                      f"{ms:.0f}", detail)
    totals = "  ".join(f"{k}: {v}" for k, v in sorted(board.totals.items()))
    logs = "".join(f"\n[dim]log: {escape(line)}[/]" for line in board.logs)
    header = Panel(f"Agent-Reach demo — coordinator {reach.url}, store {db}\n"
                   f"totals  {totals or '—'}   ({max(0.0, left):.0f}s of traffic left){logs}")
    return Group(header, agents, tasks)


class _BoardLog(logging.Handler):
    """The library's warnings and errors while the demo runs, one line each on the board: the
    demo's own injected faults would otherwise print full tracebacks above the live table."""

    def __init__(self, board: Board) -> None:
        super().__init__(logging.WARNING)
        self.board = board

    def emit(self, record: logging.LogRecord) -> None:
        self.board.logs.appendleft(record.getMessage())
        self.board.logged += 1


@contextmanager
def _logs_on(board: Board) -> Iterator[None]:
    logger = logging.getLogger("reach")
    handler, propagate = _BoardLog(board), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


async def run_demo(seconds: float = 10.0, live: bool = True, console: Console | None = None
                   ) -> int:
    console = console or Console()
    rng = random.Random(7)
    board = Board()
    with tempfile.TemporaryDirectory(prefix="reach-demo-") as tmp, _logs_on(board):
        db = Path(tmp) / "reach.db"
        async with AsyncExitStack() as legacy, \
                Reach.start(store=f"sqlite:///{db}", heartbeat_interval=0.5) as reach:
            billing = Billing()
            agents = [*build_agents(rng), billing.agent]
            for agent in agents:
                await agent.connect(reach.url)
            for adapter in await demo_adapters.start_legacy(legacy, rng):
                await reach.attach(adapter)
            async with Client.connect(reach.url, caller="demo-planner") as client:
                end = time.monotonic() + seconds
                if live:
                    with Live(render(reach, board, seconds, db), console=console,
                              refresh_per_second=4) as view:
                        await _traffic(client, board, end, rng,
                                       lambda: view.update(render(
                                           reach, board, end - time.monotonic(), db)))
                        view.update(render(reach, board, 0, db))
                else:
                    await _traffic(client, board, end, rng, lambda: None)
                board.letter = await dead_letter_story(reach, client, billing)
            for agent in agents:
                await agent.close()
            _summary(console, reach, board)
    return 0


async def _traffic(client: Client, board: Board, end: float, rng: random.Random,
                   refresh: Any) -> None:
    pending: set[asyncio.Task[None]] = set()
    i = 0
    while time.monotonic() < end:
        capability, params = CALLS[i % len(CALLS)]
        i += 1
        work = asyncio.get_running_loop().create_task(_one(client, board, capability, params))
        pending.add(work)
        work.add_done_callback(pending.discard)
        refresh()
        await asyncio.sleep(rng.uniform(0.05, 0.15))
    if pending:
        await asyncio.wait(pending, timeout=5)
    refresh()


async def _one(client: Client, board: Board, capability: str, params: dict[str, Any]) -> None:
    started = time.perf_counter()
    try:
        handle = await client.submit(capability, params)
        result = await handle.result(timeout=5)
        if capability == "report.generate" and board.report_trace is None:
            board.report_trace = handle.trace_id
        board.add(capability, "ok", (time.perf_counter() - started) * 1000,
                  demo_adapters.detail(result))
    except ReachError as exc:
        board.add(capability, exc.code, (time.perf_counter() - started) * 1000, exc.message)


def _summary(console: Console, reach: Reach, board: Board) -> None:
    console.print()
    console.print("[bold]outcomes[/]: " + ", ".join(f"{k} {v}" for k, v in
                                                    sorted(board.totals.items())))
    if board.report_trace:
        console.print(f"[bold]one trace[/] ({board.report_trace}): report.generate → sales.query")
        events = reach.trace(board.report_trace)
        t0 = events[0]["at"] if events else 0.0
        for e in events:
            console.print(f"  +{(e['at'] - t0) * 1000:7.1f} ms  {e['capability']:<16} "
                          f"{e['state']:<11} {e['note']}")
    if board.letter:
        for line in board.letter:
            console.print(line, highlight=False, soft_wrap=True)
    else:
        console.print(f"[bold]dead letters[/]: {len(reach.dead_letters())}")
    if board.logged:  # kept off the terminal while the demo ran: the latest, one line each
        console.print(f"[bold]log lines[/]: {board.logged}, the latest:")
        for line in board.logs:
            console.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
    console.print("Next: `reach serve` for a standalone coordinator; see README.md.")
