"""Agents that don't speak Reach, reached as they are (docs/adapters.md).

    from reach.adapters import HttpAgent, ProcessAgent
    await reach.attach(HttpAgent("legacy-orders", "http://127.0.0.1:9000", capabilities={...}))

Each adapter is a ``ports.AgentLink`` the coordinator drives: the gateway gives it work exactly
as it gives work to a websocket agent, with the same timeouts, retries, breakers, dead letters
and traces, and ``reach.agents()`` shows it labelled with its ``kind``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reach._lazy import exports

if TYPE_CHECKING:
    from reach.adapters.a2a import A2AAgent
    from reach.adapters.base import Adapter, AdapterAnswer, AdapterFault, Undelivered
    from reach.adapters.config import AgentsFileError, load_agents, parse_agents
    from reach.adapters.http import HttpAgent
    from reach.adapters.mcp import McpServer
    from reach.adapters.nats import NatsAgent
    from reach.adapters.process import ProcessAgent

__all__ = ["A2AAgent", "Adapter", "AdapterAnswer", "AdapterFault", "AgentsFileError", "HttpAgent",
           "McpServer", "NatsAgent", "ProcessAgent", "Undelivered", "load_agents",
           "parse_agents"]
# Each name loads on first use (PEP 562): importing ``reach.adapters.http`` runs this file
# first, which must not run the adapters that import it; and ``NatsAgent`` needs nats-py, an
# optional extra (building one without it says how to install it), ``McpServer`` the mcp
# extra, ``A2AAgent`` the a2a extra, ``HttpAgent`` aiohttp.
_HOME = {"A2AAgent": "a2a", "Adapter": "base", "AdapterAnswer": "base", "AdapterFault": "base",
         "Undelivered": "base", "AgentsFileError": "config", "load_agents": "config",
         "parse_agents": "config", "HttpAgent": "http", "McpServer": "mcp",
         "NatsAgent": "nats", "ProcessAgent": "process"}


__getattr__ = exports(__name__, {name: "." + home for name, home in _HOME.items()})
