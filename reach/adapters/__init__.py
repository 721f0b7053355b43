"""Agents that don't speak Reach, reached as they are (docs/adapters.md).

    from reach.adapters import HttpAgent, ProcessAgent
    await reach.attach(HttpAgent("legacy-orders", "http://127.0.0.1:9000", capabilities={...}))

Each adapter is a ``ports.AgentLink`` the coordinator drives: the gateway gives it work exactly
as it gives work to a websocket agent, with the same timeouts, retries, breakers, dead letters
and traces, and ``reach.agents()`` shows it labelled with its ``kind``.
"""

from typing import TYPE_CHECKING, Any

from reach.adapters.base import Adapter, AdapterAnswer, AdapterFault, Undelivered
from reach.adapters.config import AgentsFileError, load_agents, parse_agents
from reach.adapters.process import ProcessAgent

__all__ = ["Adapter", "AdapterAnswer", "AdapterFault", "AgentsFileError", "HttpAgent",
           "McpServer", "NatsAgent", "ProcessAgent", "Undelivered", "load_agents",
           "parse_agents"]

if TYPE_CHECKING:
    from reach.adapters.http import HttpAgent
    from reach.adapters.mcp import McpServer
    from reach.adapters.nats import NatsAgent


def __getattr__(name: str) -> Any:
    """``NatsAgent`` is imported when first asked for: it needs nats-py, an optional extra
    (building one without it says how to install it)."""
    if name == "NatsAgent":
        from reach.adapters.nats import NatsAgent

        globals()["NatsAgent"] = NatsAgent
        return NatsAgent
    if name == "HttpAgent":  # imported when asked for (its client, aiohttp, is ~90 ms)
        from reach.adapters.http import HttpAgent

        globals()["HttpAgent"] = HttpAgent
        return HttpAgent
    if name == "McpServer":  # the mcp extra
        from reach.adapters.mcp import McpServer

        globals()["McpServer"] = McpServer
        return McpServer
    raise AttributeError(f"module 'reach.adapters' has no attribute {name!r}")
