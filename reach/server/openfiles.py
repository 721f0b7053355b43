"""Open files: the process's descriptor limit, and the connection caps that fit under it.

Every connection is a file descriptor, and so are the store's files, the listening sockets,
the audit log, subprocess pipes and outgoing links. At the limit ``accept`` fails for everyone
(EMFILE): in the attack trial 1,400 idle sockets on the REST port, or 1,009 on the websocket
port, locked every caller and the operator out of a process left at the usual soft limit of
1,024. So at start the soft limit is raised to the hard one (``raise_limit``), and the caps
are derived from it (``Capacity.plan``): a reserve of descriptors is never handed to peers,
the rest is split between the two ports, and a few websocket sessions past the ordinary cap
are kept for operators with the admin token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from reach.config import Settings

try:  # (not on Windows: there the caps are the settings' alone)
    import resource
except ImportError:  # pragma: no cover - POSIX in CI
    resource = None  # type: ignore[assignment]

log = logging.getLogger("reach")
SANE_MAX = 1 << 20  # the soft limit is raised to the hard one, but not past this
RESERVE_SHARE = 8  # one descriptor in 8 (at least 32, at most 1,024) is not for peers


def raise_limit(most: int = SANE_MAX) -> int | None:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (at most ``most``);
    the soft limit in force afterwards (None where there is no such limit). Never lowers it;
    a refusal (a hard limit the kernel caps lower) leaves it as it was."""
    if resource is None:  # pragma: no cover
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = most if hard == resource.RLIM_INFINITY else min(hard, most)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # pragma: no cover - a kernel capping it lower (macOS)
            pass
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return most if soft == resource.RLIM_INFINITY else int(soft)


@dataclass(frozen=True, slots=True)
class Capacity:
    """How many connections the websocket port takes, of which kinds.

    ``sockets``: every accepted socket on the port, whatever it does (past it the oldest
    connection that has not said who it is is closed to make room, or the new one is);
    ``connections``: sessions of agents, callers and peers; ``admin``: admin-feed sessions
    kept beyond ``connections`` (an operator gets in when the rest is full); ``unidentified``:
    connections that have not sent their first frame yet, across addresses; ``per_address``:
    the same from one address; ``reserve``: descriptors left for the store, files and links.
    """

    sockets: int
    connections: int
    admin: int
    unidentified: int
    per_address: int
    reserve: int = 0
    limit: int | None = None

    @classmethod
    def plan(cls, limit: int | None, max_connections: int,
             max_pending_per_address: int) -> Capacity:
        """The caps for a process allowed ``limit`` open files (None: no limit known). The
        reserve is a share of the limit; the rest is split between the websocket port and
        the REST door (each takes at most half); the settings' caps apply below that."""
        if limit is None:
            door, reserve = max_connections + 16 + max(max_pending_per_address,
                                                       max_connections // 4), 0
        else:
            reserve = min(1024, max(32, limit // RESERVE_SHARE))
            door = max(3, (limit - reserve) // 2)
        admin = max(1, min(16, door // 16))
        connections = max(1, min(max_connections, door - admin))
        unidentified = max(1, min(door - admin,
                                  max(max_pending_per_address, connections // 4)))
        return cls(sockets=min(door, connections + admin + unidentified),
                   connections=connections, admin=admin, unidentified=unidentified,
                   per_address=min(max_pending_per_address, unidentified),
                   reserve=reserve, limit=limit)


def fit_open_files(settings: Settings) -> tuple[Capacity, Settings]:
    """Raise the soft limit, plan the caps under it, and the settings with ``max_connections``
    lowered to the plan's where it asked for more than fits (said at DEBUG: with the
    default 10,000 that happens under any hard limit below ~22,000, and ``reach.capacity``
    shows what is in force), so a flood of sockets meets a refusal, not EMFILE for everyone,
    the operator included."""
    capacity = Capacity.plan(raise_limit(), settings.max_connections,
                             settings.max_pending_per_address)
    if capacity.connections >= settings.max_connections:
        return capacity, settings
    log.debug("max_connections %d lowered to %d: %d open files allowed, %d of them kept back "
              "and the rest shared with the REST door", settings.max_connections,
              capacity.connections, capacity.limit, capacity.reserve)
    return capacity, replace(settings, max_connections=capacity.connections)
