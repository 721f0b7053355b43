#!/usr/bin/env python3
"""Which HTTP client carries the HTTP agents' calls: httpx.AsyncClient against
aiohttp.ClientSession, each keeping 32 requests in flight to one aiohttp.web echo server on
loopback, in one run, rounds interleaved. reach.adapters.http uses the faster one.

    python bench/http_clients.py            # 3 rounds of 3000 calls per client (~15 s)
    python bench/http_clients.py --quick    # 1 round of 400 calls (a few seconds)

The echo server is a child process (``--role echo``: it prints ``BENCH READY URL`` and serves
until its stdin closes); both clients run in this process, one after the other, so they get
the same machine. bench/adapters_http.py reuses the echo server and the callers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import PAYLOAD, Launcher, batch, say, serve_commands

SCRIPT = Path(__file__).resolve()
INFLIGHT = 32
CLIENTS = ("aiohttp", "httpx")


# ------------------------------------------------------------------ the echo server (child)


async def serve_echo() -> None:
    """POST /echo answers its JSON body back; GET /healthz answers 204."""
    from aiohttp import web

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read(), content_type="application/json")

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/echo", echo)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        say("READY", f"http://127.0.0.1:{port}")
        await serve_commands()
    finally:
        await runner.cleanup()


async def start_echo(launcher: Launcher) -> str:
    """Start the echo server child; its base URL."""
    _, url = await launcher.start("echo", [str(SCRIPT), "--role", "echo"])
    return url


# ------------------------------------------------------------------ the callers


class AiohttpCaller:
    """POST PAYLOAD to /echo with one aiohttp.ClientSession (its pool sized to the load)."""

    def __init__(self) -> None:
        self.session: Any = None
        self.url = ""

    async def open(self, url: str) -> None:
        import aiohttp
        self.url = url + "/echo"
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))

    async def prepare(self, inflight: int) -> None:
        return None

    async def call(self) -> Any:
        async with self.session.post(self.url, data=json.dumps(PAYLOAD).encode(),
                                     headers={"Content-Type": "application/json"}) as resp:
            return json.loads(await resp.read())

    async def close(self) -> None:
        await self.session.close()


class HttpxCaller:
    """The same request with one httpx.AsyncClient (pool limits raised past the load)."""

    def __init__(self) -> None:
        self.client: Any = None
        self.url = ""

    async def open(self, url: str) -> None:
        import httpx
        self.url = url + "/echo"
        self.client = httpx.AsyncClient(limits=httpx.Limits(max_connections=256,
                                                            max_keepalive_connections=256))

    async def prepare(self, inflight: int) -> None:
        return None

    async def call(self) -> Any:
        resp = await self.client.post(self.url, content=json.dumps(PAYLOAD).encode(),
                                      headers={"Content-Type": "application/json"})
        return json.loads(resp.content)

    async def close(self) -> None:
        await self.client.aclose()


def caller(kind: str) -> AiohttpCaller | HttpxCaller:
    return AiohttpCaller() if kind == "aiohttp" else HttpxCaller()


# ------------------------------------------------------------------ the run


async def measure(quick: bool) -> dict[str, list[dict[str, Any]]]:
    """Rounds of one batch per client at 32 in flight; {client: [batch results]}."""
    rounds, calls = (1, 400) if quick else (3, 3000)
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in CLIENTS}
    with tempfile.TemporaryDirectory(prefix="reach-http-clients-") as tmp:
        launcher = Launcher(tmp, tmp)
        try:
            url = await start_echo(launcher)
            callers = {k: caller(k) for k in CLIENTS}
            for c in callers.values():
                await c.open(url)
            try:
                for c in callers.values():  # warm: connections open, code paths hot
                    await batch(c.call, INFLIGHT, calls // 5, 60)
                for r in range(rounds):
                    order = CLIENTS if r % 2 == 0 else CLIENTS[::-1]
                    for kind in order:
                        results[kind].append(await batch(callers[kind].call, INFLIGHT,
                                                         calls, 120))
            finally:
                for c in callers.values():
                    await c.close()
        finally:
            await launcher.stop()
    return results


def table(results: dict[str, list[dict[str, Any]]]) -> tuple[str, float]:
    """The Markdown table and aiohttp's calls/s over httpx's."""
    med = {k: {"rate": statistics.median(r["rate"] for r in rows),
               "p50": statistics.median(r["p50_ms"] for r in rows),
               "errors": sum(r["errors"] for r in rows)} for k, rows in results.items()}
    best = max(med.values(), key=lambda m: m["rate"])["rate"]
    lines = ["| client | in flight | calls/s | p50 ms | vs best | errors |",
             "|---|---:|---:|---:|---:|---:|"]
    for kind in CLIENTS:
        m = med[kind]
        lines.append(f"| {kind} | {INFLIGHT} | {m['rate']:.0f} | {m['p50']:.2f} | "
                     f"{m['rate'] / best:.0%} | {m['errors']} |")
    return "\n".join(lines), med["aiohttp"]["rate"] / max(med["httpx"]["rate"], 1e-9)


def main(quick: bool) -> int:
    import aiohttp
    import httpx
    print(f"## HTTP clients: {INFLIGHT} in flight to one aiohttp.web echo on loopback "
          f"(aiohttp {aiohttp.__version__}, httpx {httpx.__version__})\n")
    text, ratio = table(asyncio.run(measure(quick)))
    print(text)
    winner = "aiohttp" if ratio >= 1 else "httpx"
    print(f"\naiohttp / httpx calls/s: {ratio:.2f}x -> the HTTP agent's client: {winner} "
          f"(reach.adapters.http uses aiohttp)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--role", choices=["echo"])
    args = parser.parse_args()
    if args.role == "echo":
        asyncio.run(serve_echo())
        sys.exit(0)
    sys.exit(main(args.quick))
