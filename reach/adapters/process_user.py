"""Which user a command-line agent's process runs as (``ProcessAgent(user=..., group=...)``).

The environment a command gets is minimal by default (process_args.MINIMAL_ENV), but that is
not isolation: a process of the coordinator's own user can read the coordinator's
``/proc/<pid>/environ`` and its memory, and any user can read its ``/proc/<pid>/cmdline``
(docs/security.md, "Adapters and processes"). ``user`` is the boundary: the command runs under
another uid, with that user's primary group (or ``group``) and no supplementary groups, so
the kernel keeps it out of the coordinator's process, files and secrets. Starting a process
as another user needs a coordinator running as root; anything else is refused when the agent
is declared, saying so.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RunAs:
    """The uid and gid a command runs as, and that user's home and name (for its env)."""

    uid: int
    gid: int
    name: str | None = None
    home: str | None = None

    def popen(self) -> dict[str, Any]:
        """The keywords that make ``create_subprocess_exec`` drop to this user (no
        supplementary groups: root's would otherwise stay with the child)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def env(self) -> dict[str, str]:
        """``HOME``, ``USER`` and ``LOGNAME`` of this user (the coordinator's would point
        the command at files it may not read)."""
        if self.name is None:
            return {}
        return {"USER": self.name, "LOGNAME": self.name,
                **({"HOME": self.home} if self.home else {})}


def run_as(agent: str, user: Any, group: Any = None) -> RunAs | None:
    """The ``RunAs`` of ``user`` (a name or a uid) and ``group`` (a name or a gid; default:
    the user's primary group); None when neither is given. ``ValueError`` naming the agent for
    an unknown user or group, or when this coordinator may not start processes as them."""
    if user is None and group is None:
        return None
    if user is None:
        raise ValueError(f"agent {agent!r}: group = {group!r} needs user = too")
    entry = _user(agent, user)
    uid = entry.pw_uid if entry is not None else user
    if group is None:
        if entry is None:
            raise ValueError(f"agent {agent!r}: uid {user} has no entry in the user "
                             f"database; give group = too")
        gid = entry.pw_gid
    else:
        gid = _group(agent, group)
    euid = os.geteuid()
    if euid != 0 and (uid, gid) != (euid, os.getegid()):
        raise ValueError(f"agent {agent!r}: user = {user!r} needs a coordinator running as "
                         f"root (it runs as uid {euid}): only root may start a process as "
                         f"another user")
    return RunAs(uid, gid, None if entry is None else entry.pw_name,
                 None if entry is None else entry.pw_dir)


def _user(agent: str, user: Any) -> pwd.struct_passwd | None:
    if isinstance(user, bool) or not isinstance(user, str | int) or user == "":
        raise ValueError(f"agent {agent!r}: user must be a user name or a uid, not {user!r}")
    try:
        return pwd.getpwnam(user) if isinstance(user, str) else pwd.getpwuid(user)
    except KeyError:
        if isinstance(user, int) and user >= 0:
            return None  # a uid without an entry is a uid still
        raise ValueError(f"agent {agent!r}: no user {user!r} on this host") from None


def _group(agent: str, group: Any) -> int:
    if isinstance(group, bool) or not isinstance(group, str | int) or group == "":
        raise ValueError(f"agent {agent!r}: group must be a group name or a gid, "
                         f"not {group!r}")
    if isinstance(group, int):
        if group < 0:
            raise ValueError(f"agent {agent!r}: group {group} is not a gid")
        return group
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(f"agent {agent!r}: no group {group!r} on this host") from None
