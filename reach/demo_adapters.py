"""The demo's agents that don't speak Reach: a REST pricing service and a command-line tax tool.

Both stand for what a team already runs: the pricing service is a plain aiohttp.web app that
knows nothing of Reach, the tax tool a Python one-liner reading JSON on stdin. The demo's
coordinator attaches them (reach.adapters) and calls them beside its websocket agents.
"""

from __future__ import annotations

import json
import random
import sys
from contextlib import AsyncExitStack
from typing import Any

from aiohttp import web

from reach.adapters.base import Adapter

# A command-line tool: JSON params on stdin, a JSON result on stdout; exit code 2 says "no
# such region" (declared as a deliberate answer: not retried, not held against the tool).
TAX_TOOL = (
    "import json, sys\n"
    "p = json.load(sys.stdin)\n"
    "rate = {'east': 0.08, 'west': 0.0725}.get(p.get('region'))\n"
    "if rate is None:\n"
    "    print(f\"no tax table for region {p.get('region')!r}\", file=sys.stderr)\n"
    "    sys.exit(2)\n"
    "print(json.dumps({'amount': p['amount'], 'tax': round(p['amount'] * rate, 2)}))\n"
)
QUOTE = {"type": "object", "properties": {"sku": {"type": "string"},
                                          "units": {"type": "integer", "minimum": 1}},
         "required": ["sku", "units"]}
TAX = {"type": "object", "properties": {"region": {"type": "string"},
                                        "amount": {"type": "number"}},
       "required": ["region", "amount"]}


def pricing_app(rng: random.Random) -> web.Application:
    """The legacy pricing service: POST /quote, GET /healthz; now and then a 503."""
    async def quote(request: web.Request) -> web.Response:
        body = await request.json()
        if rng.random() < 0.1:  # an overloaded instance: a fault, retried (idempotent)
            return web.Response(status=503, text="pricing backend busy")
        unit = 9.5 + (sum(map(ord, body["sku"])) % 40)
        return web.json_response({"sku": body["sku"], "units": body["units"],
                                  "price": round(unit * body["units"], 2)})

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/quote", quote)
    app.router.add_get("/healthz", healthz)
    return app


async def start_legacy(stack: AsyncExitStack, rng: random.Random) -> list[Adapter]:
    """Start the pricing service on a free loopback port; return both adapters, unattached."""
    from reach.adapters.http import HttpAgent
    from reach.adapters.process import ProcessAgent

    # shutdown_timeout: aiohttp waits up to 60 s by default for open requests at cleanup; a
    # demo that ends must not wait for a quote nobody will read
    runner = web.AppRunner(pricing_app(rng), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    pricing = HttpAgent(
        "legacy-pricing", f"http://127.0.0.1:{port}", health="/healthz", max_concurrency=16,
        capabilities={"price.quote": {"method": "POST", "path": "/quote", "params": QUOTE,
                                      "idempotent": True, "latency_ms": 100,
                                      "intents": ["how much", "报价"]}})
    tax = ProcessAgent(
        "tax-cli", [sys.executable, "-c", TAX_TOOL], max_concurrency=4, answer_codes=[2],
        capabilities={"tax.compute": {"params": TAX, "idempotent": True, "latency_ms": 800}})
    return [pricing, tax]


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("price.quote", {"sku": "SKU-1", "units": 3}),
    ("tax.compute", {"region": "east", "amount": 120.0}),
    ("tax.compute", {"region": "north", "amount": 10.0}),  # exit 2: a deliberate answer
]


def detail(result: Any) -> str:
    return json.dumps(result, ensure_ascii=False) if isinstance(result, dict) else str(result)
