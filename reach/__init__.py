"""Agent-Reach: the reach layer for multi-agent systems — find, route, deliver, see.

    from reach import Reach, Agent, Client, Context, ReachError, TaskError
"""

from __future__ import annotations

from .agent import Agent
from .client import Client, Handle
from .config import Settings
from .context import Context
from .errors import (
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
from .reach import Reach

__all__ = [
    "Agent",
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
__version__ = "0.1.0"
