"""Agent-Reach: the reach layer for multi-agent systems — find, route, deliver, see.

    from reach import Reach, Agent, Client, Context, ReachError, TaskError

The names are loaded when first used (PEP 562): an agent's or a caller's process that imports
``Agent`` or ``Client`` loads the SDK and the wire models, not the coordinator, its store
(SQLAlchemy) or its HTTP door (aiohttp).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reach._lazy import exports
from reach._version import __version__ as __version__
from reach.errors import (
    Cancelled,
    InvalidParams,
    NoRoute,
    ProtocolError,
    ReachError,
    ReachTimeout,
    Rejected,
    TaskError,
    TaskFailed,
    Unauthorized,
    Unavailable,
)

if TYPE_CHECKING:
    from reach.admin import Admin
    from reach.config import Settings
    from reach.reach import Reach
    from reach.sdk.agent import Agent
    from reach.sdk.client import Client
    from reach.sdk.context import Context
    from reach.sdk.handle import Handle

# name → the module that defines it, imported on first use
_LAZY = {
    "Admin": "reach.admin",
    "Agent": "reach.sdk.agent",
    "Client": "reach.sdk.client",
    "Context": "reach.sdk.context",
    "Handle": "reach.sdk.handle",
    "Reach": "reach.reach",
    "Settings": "reach.config",
}

__all__ = [
    "Admin",
    "Agent",
    "Cancelled",
    "Client",
    "Context",
    "Handle",
    "InvalidParams",
    "NoRoute",
    "ProtocolError",
    "Reach",
    "ReachError",
    "ReachTimeout",
    "Rejected",
    "Settings",
    "TaskError",
    "TaskFailed",
    "Unauthorized",
    "Unavailable",
]


__getattr__ = exports(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
