"""Agents that don't speak Reach, reached as they are (docs/adapters.md).

    from reach.adapters import HttpAgent, ProcessAgent
    await reach.attach(HttpAgent("legacy-orders", "http://127.0.0.1:9000", capabilities={...}))

Each adapter is a ``ports.AgentLink`` the coordinator drives: the gateway gives it work exactly
as it gives work to a websocket agent, with the same timeouts, retries, breakers, dead letters
and traces, and ``reach.agents()`` shows it labelled with its ``kind``.
"""

from reach.adapters.base import Adapter, AdapterAnswer, AdapterFault, Undelivered
from reach.adapters.config import AgentsFileError, load_agents, parse_agents

__all__ = ["Adapter", "AdapterAnswer", "AdapterFault", "AgentsFileError", "Undelivered",
           "load_agents", "parse_agents"]
