"""``ProcessAgent(user=...)``: the command runs as another user, the real boundary between a
tool and the coordinator's secrets (issue 25, item 10).

The minimal environment keeps secrets out of a command's environment, but a command of the
coordinator's own user can still read them from ``/proc/<coordinator>/environ`` (and any
user can read its command line). With ``user`` the command runs under that uid, with no
supplementary groups, and the kernel refuses it the coordinator's ``/proc`` files. Starting
a process as another user needs root: CI runs as root; elsewhere those tests are skipped and
the refusal is tested instead.
"""

from __future__ import annotations

import os
import pwd
from typing import Any

import pytest

from reach import Client, Reach
from reach.adapters import ProcessAgent
from reach.adapters.config import parse_agents

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="starting a process as another user needs root")
# Reports who it runs as and whether it can read its parent's (the coordinator's) environ.
WHO = ('printf \'{"uid": %s, "gid": %s, "groups": "%s", "home": "%s", '
       '"reads_parent_environ": %s}\' "$(id -u)" "$(id -g)" "$(id -G)" "$HOME" '
       '"$(cat /proc/$PPID/environ >/dev/null 2>&1 && echo true || echo false)"')
STDIO = ('read line; id=$(printf "%s" "$line" | sed \'s/.*"id": *\\([0-9]*\\).*/\\1/\'); '
         'printf \'{"id": %s, "result": {"uid": %s}}\\n\' "$id" "$(id -u)"; cat >/dev/null')
NOBODY = pwd.getpwnam("nobody")


@needs_root
async def test_a_per_call_command_runs_as_nobody_and_cannot_read_the_coordinator() -> None:
    async with Reach.start(heartbeat_interval=0.5) as reach:
        agent = ProcessAgent("who", ["/bin/sh", "-c", WHO], {"who.ami": {"input": "none"}},
                             user="nobody")
        assert agent.describe()["uid"] == NOBODY.pw_uid
        await reach.attach(agent)
        async with Client.connect(reach.url) as client:
            got: Any = await client.call("who.ami", {}, timeout=5)
    assert got["uid"] == NOBODY.pw_uid and got["gid"] == NOBODY.pw_gid
    assert got["groups"] == str(NOBODY.pw_gid)  # root's supplementary groups are dropped
    assert got["home"] == NOBODY.pw_dir
    assert got["reads_parent_environ"] is False


@needs_root
async def test_without_user_the_same_command_can_read_the_coordinator() -> None:
    """What the docs say plainly: the minimal environment is not isolation."""
    async with Reach.start(heartbeat_interval=0.5) as reach:
        await reach.attach(ProcessAgent("who", ["/bin/sh", "-c", WHO],
                                        {"who.ami": {"input": "none"}}))
        async with Client.connect(reach.url) as client:
            got: Any = await client.call("who.ami", {}, timeout=5)
    assert got["uid"] == 0 and got["reads_parent_environ"] is True


@needs_root
async def test_a_stdio_process_runs_as_the_uid_and_group_given() -> None:
    async with Reach.start(heartbeat_interval=0.5) as reach:
        agent = ProcessAgent("who", ["/bin/sh", "-c", STDIO], {"who.ami": {}}, mode="stdio",
                             user=NOBODY.pw_uid, group="nogroup")
        await reach.attach(agent)
        async with Client.connect(reach.url) as client:
            got: Any = await client.call("who.ami", {}, timeout=5)
        assert got == {"uid": NOBODY.pw_uid}
        assert agent.pid is not None
        with open(f"/proc/{agent.pid}/status") as status:
            uids = next(line for line in status if line.startswith("Uid:")).split()[1:]
        assert uids == [str(NOBODY.pw_uid)] * 4


@needs_root
def test_user_is_declared_in_the_agents_file() -> None:
    [agent] = parse_agents('[[agent]]\nkind = "process"\nname = "who"\nargv = ["/bin/true"]\n'
                           'user = "nobody"\n[agent.capabilities."who.ami"]\n', env={})
    assert isinstance(agent, ProcessAgent) and agent.run_as is not None
    assert (agent.run_as.uid, agent.run_as.gid) == (NOBODY.pw_uid, NOBODY.pw_gid)


def test_a_wrong_user_or_group_is_refused_when_declared() -> None:
    caps = {"who.ami": {}}
    with pytest.raises(ValueError, match="no user 'no-such-user-here' on this host"):
        ProcessAgent("who", ["/bin/true"], caps, user="no-such-user-here")
    with pytest.raises(ValueError, match="no group 'no-such-group-here'"):
        ProcessAgent("who", ["/bin/true"], caps, user="nobody", group="no-such-group-here")
    with pytest.raises(ValueError, match="user must be a user name or a uid"):
        ProcessAgent("who", ["/bin/true"], caps, user=True)
    with pytest.raises(ValueError, match="group = 'nogroup' needs user = too"):
        ProcessAgent("who", ["/bin/true"], caps, group="nogroup")


def test_without_root_another_user_is_refused_saying_why(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ValueError, match=r"user = 'nobody' needs a coordinator running as "
                                         r"root \(it runs as uid 1000\)"):
        ProcessAgent("who", ["/bin/true"], {"who.ami": {}}, user="nobody")


@needs_root
def test_a_uid_without_an_entry_needs_a_group() -> None:
    caps = {"who.ami": {}}
    free = next(uid for uid in range(40000, 41000) if not _exists(uid))
    with pytest.raises(ValueError, match=f"uid {free} has no entry in the user database; "
                                         f"give group = too"):
        ProcessAgent("who", ["/bin/true"], caps, user=free)
    agent = ProcessAgent("who", ["/bin/true"], caps, user=free, group=free)
    assert agent.run_as is not None and (agent.run_as.uid, agent.run_as.gid) == (free, free)
    assert agent.run_as.env() == {}  # no home or name to give it
    with pytest.raises(ValueError, match="group -1 is not a gid"):
        ProcessAgent("who", ["/bin/true"], caps, user=free, group=-1)
    with pytest.raises(ValueError, match="group must be a group name or a gid"):
        ProcessAgent("who", ["/bin/true"], caps, user=free, group=1.5)
    with pytest.raises(ValueError, match="no user -3 on this host"):
        ProcessAgent("who", ["/bin/true"], caps, user=-3)


def _exists(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True
