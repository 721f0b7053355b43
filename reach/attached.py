"""Agents that do not speak Reach, attached to a coordinator (``Reach.attach``/``detach``).

An adapter (reach.adapters: HTTP service, command-line tool, NATS worker) is registered under
its name like a websocket agent and driven with the same guarantees; its health checks are its
heartbeats. ``reach`` is the ``Reach`` coordinator (typed ``Any`` here: reach.reach imports
this module).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from reach.adapters.base import Adapter, Membership
from reach.server.agent_session import precompile

log = logging.getLogger("reach")


async def attach(reach: Any, adapter: Adapter) -> dict[str, Any]:
    """Register ``adapter`` with ``reach`` (see ``Reach.attach``); its view."""
    if not reach.started:
        raise RuntimeError("start the coordinator before attaching agents: "
                           "reach = await Reach.start(); await reach.attach(...)")
    name = adapter.name
    taken = reach.registry.by_name.get(name)
    if name in reach.adapters or (taken is not None and taken.link is not None):
        raise ValueError(f"an agent named {name!r} is already attached or connected; "
                         f"detach it first (await reach.detach({name!r})) or pick "
                         f"another name")
    s = reach.settings
    adapter.max_schema_bytes = s.max_schema_bytes  # (what it builds from a document, bounded)
    await adapter.open()
    try:
        # (after open: an adapter may read its capabilities there, e.g. from OpenAPI)
        await asyncio.to_thread(precompile, [spec.params for spec in adapter.specs],
                                s.max_schema_bytes)
        healthy = await adapter.first_check(s.heartbeat_interval)
        # Its checks are its beats, every health_interval: that is its heartbeat interval.
        every = adapter.health_interval or s.heartbeat_interval
        registration = reach.registry.register(
            agent_id=reach.identities.identity(name), name=name, version=adapter.version,
            max_concurrency=adapter.max_concurrency, specs=adapter.specs, link=adapter,
            now=reach.clock.wall(), kind=adapter.kind, heard=healthy,
            heartbeat_interval=every)
    except BaseException:
        await adapter.close("attach failed")
        raise
    for warning in registration.warnings:
        log.warning("agent %s: %s", name, warning)
    reach.adapters[name] = adapter
    adapter.watch(Membership(reach.registry, registration.record, reach.clock,
                             registration.record.liveness.interval, reach.gateway.probes))
    await reach.identities.remember(registration.record, adapter.specs)
    view: dict[str, Any] = reach.ops.agents(names={name})[0]
    return view


async def detach(reach: Any, name: str, grace: float | None) -> None:
    """Stop routing to an attached agent, drain it, release it (see ``Reach.detach``)."""
    adapter = reach.adapters.pop(name, None)
    if adapter is None:
        raise ValueError(f"no attached agent named {name!r}; attached: "
                         f"{sorted(reach.adapters) or 'none'}")
    record = reach.registry.by_name.get(name)
    if record is not None:  # pragma: no branch — attach registered it; names stay
        reach.registry.deregister(record, reach.clock.wall(), by="detach")
        await adapter.drained(reach.settings.drain_timeout if grace is None else grace)
    await adapter.close("detached")
