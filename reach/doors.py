"""Parts of a coordinator that ``Reach`` builds from its settings but that are not its core:
the protocol doors on the HTTP port (MCP, A2A: each an extra, imported only when asked for),
and the one sender of task notifications (A2A push notifications and completion webhooks,
reach.server.pushes), which every coordinator has, whether or not the A2A door is on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reach.config import Settings
from reach.core.trust import Trust
from reach.gateway.gateway import Gateway
from reach.ports import Clock
from reach.server import outbound
from reach.server.front import FrontDoor
from reach.server.notify import Notify, WebhookKind
from reach.server.pushes import Pusher
from reach.store.store import Store


def sender(s: Settings, gateway: Gateway, store: Store, trust: Trust, clock: Clock
           ) -> tuple[Pusher, Notify]:
    """The coordinator's sender, with the webhook kind (``notify`` on submit) added."""
    pusher = Pusher(gateway, store)
    kind = WebhookKind(outbound.Allow.of(s.notify_allow), trust, store, s.notify_secret,
                       clock.wall)
    notify = Notify(pusher, kind)
    gateway.on_replay = notify.replayed  # a replayed dead letter tells its new end too
    return pusher, notify


def protocol_doors(s: Settings, front: FrontDoor | None, pusher: Pusher) -> tuple[Any, Any]:
    """The MCP door and the A2A door (docs/mcp.md, docs/a2a.md), each None when off."""
    def mcp(door: FrontDoor) -> Any:
        from reach.server.mcp_door import McpDoor  # the mcp extra, when asked for
        return McpDoor(door)

    def a2a(door: FrontDoor) -> Any:
        from reach.server.a2a_door import A2ADoor  # the a2a extra, when asked for
        return A2ADoor(door, pusher)
    return (_door("mcp", "MCP", front, mcp) if s.mcp else None,
            _door("a2a", "A2A", front, a2a) if s.a2a else None)


def _door(name: str, sdk: str, front: FrontDoor | None,
          make: Callable[[FrontDoor], Any]) -> Any:
    """One protocol door, its extra imported only now (``make``), with what to do when the
    HTTP port is off or the extra is not installed."""
    if front is None:
        raise ValueError(f"{name}=True needs the HTTP port (http_port must not be None)")
    try:
        return make(front)
    except ImportError as exc:
        raise ImportError(f"{name}=True needs the {sdk} SDK: pip install "
                          f"'agent-reach[{name}]' ({exc})") from None
