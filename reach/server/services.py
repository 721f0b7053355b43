"""What the websocket edge needs of the coordinator, and nothing more.

A session is given ``Services``: the settings, the gateway, the registry, trust, the clock,
agent identities, and (for the admin feed) an ``Operator``. It never holds the whole
coordinator, so nothing in reach/server imports reach/reach.py or reach/ops.py: the coordinator
builds these parts and hands them down (data flows one way, DESIGN.md "Layout").
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

from reach.cluster.node import Node
from reach.config import Settings
from reach.core.registry import Registry
from reach.core.trust import Trust
from reach.gateway.gateway import Gateway
from reach.ports import Clock
from reach.server.identities import Identities


class Operator(Protocol):
    """The operator surface the admin feed reads and commands (reach.ops.Ops implements it)."""

    def coordinator(self) -> dict[str, Any]:
        """The ``coordinator`` object of a snapshot: url, version, started_at, store."""
        ...

    def agents(self, *, names: set[str] | None = None) -> list[dict[str, Any]]: ...

    def traces(self, limit: int | None = None) -> list[dict[str, Any]]: ...

    def trace_summary(self, trace_id: str) -> dict[str, Any]: ...

    def dead_letters(self) -> list[dict[str, Any]]: ...

    def dead_letter(self, task_id: str) -> dict[str, Any] | None: ...

    def metrics(self) -> dict[str, Any]: ...

    def alerts(self) -> list[dict[str, Any]]: ...

    def overrides(self) -> dict[str, Any]: ...

    def command(self, action: str, args: dict[str, Any]) -> Awaitable[Any]:
        """Run one admin command (docs/admin-feed.md, "Commands")."""
        ...

    def record(self, action: str, args: dict[str, Any], ok: bool) -> None:
        """Publish an operator's action as an ``admin`` event."""
        ...


@dataclass(frozen=True, slots=True)
class Services:
    """The parts a session works with, built once by the coordinator."""

    settings: Settings
    gateway: Gateway
    registry: Registry
    trust: Trust
    clock: Clock
    identities: Identities
    operator: Operator
    admin_token: str
    # the cluster (docs/protocol.md §14): this node's id, the token peers must present, the
    # feed of this node's own agents to its peer sessions (None: no peer sessions taken)
    node: Node | None = None
    # intent routing with the model extra (reach.server.intent_routing.ModelRouting), when on
    intent_routing: Any = None
    # completion webhooks (reach.server.notify.Notify): a submit's ``notify`` is checked and
    # kept by the doors that accept it
    notify: Any = None

    @property
    def node_id(self) -> str:
        return "" if self.node is None else self.node.node_id

