"""Agent-Reach: the reach layer for multi-agent systems — find, route, deliver, see.

    from reach import Reach, Agent, Client, Context, ReachError, TaskError
"""

from __future__ import annotations

from reach._version import __version__ as __version__
from reach.admin import Admin
from reach.config import Settings
from reach.errors import (
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
from reach.reach import Reach
from reach.sdk.agent import Agent
from reach.sdk.client import Client
from reach.sdk.context import Context
from reach.sdk.handle import Handle

__all__ = [
    "Admin",
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
