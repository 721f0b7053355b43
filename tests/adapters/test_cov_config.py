"""The agents file on its edges: a table without a name, a kind whose module cannot be
imported or whose extra is not installed, a kind whose class inherits its arguments."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from reach.adapters import AgentsFileError, parse_agents
from reach.adapters import config as agents_config

from .test_attach import Scripted


class Inherited(Scripted):
    """A kind whose class has no __init__ of its own: it takes its parent's arguments."""

    kind = "inherited"


@pytest.fixture(autouse=True)
def kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(agents_config.KINDS, "inherited", (__name__, "Inherited"))
    monkeypatch.setitem(agents_config.KINDS, "ghost", ("reach.adapters.no_such_module", "X"))


def test_a_table_without_a_name_is_named_by_its_line() -> None:
    with pytest.raises(AgentsFileError,
                       match=r"^agents\.toml, line 2: every agent needs name = \"\.\.\.\"$"):
        parse_agents("\n[[agent]]\nkind = 'inherited'\nname = 7\n", env={})


def test_a_kind_whose_module_cannot_be_imported_says_so() -> None:
    with pytest.raises(AgentsFileError, match=r"line 1 \(agent 'a'\): ghost agents are not "
                                              r"available here: No module named"):
        parse_agents("[[agent]]\nkind = 'ghost'\nname = 'a'\n", env={})


def test_a_class_without_its_own_init_takes_its_parents_arguments() -> None:
    (agent,) = parse_agents("[[agent]]\nkind = 'inherited'\nname = 'a'\nmax_concurrency = 2\n"
                            "script = ['ok']\n", env={})
    assert isinstance(agent, Inherited) and agent.max_concurrency == 2 and agent.script == ["ok"]
    with pytest.raises(AgentsFileError, match=r"unknown key\(s\) \['colour'\] for a "
                                              r"inherited agent; allowed: .*'script'"):
        parse_agents("[[agent]]\nkind = 'inherited'\nname = 'a'\ncolour = 1\n", env={})


def test_a_nats_agent_without_nats_py_is_a_file_error_saying_what_to_install() -> None:
    """nats-py is an optional extra: a file declaring a NATS agent where it is missing is
    refused like any other mistake (file, line, what to do), not with an ImportError."""
    script = (
        "import sys; sys.modules['nats'] = None\n"
        "from reach.adapters import AgentsFileError, parse_agents\n"
        "try:\n"
        "    parse_agents(\"[[agent]]\\nkind = 'nats'\\nname = 'w'\\n"
        "[agent.capabilities.'orders.lookup']\\n\")\n"
        "except AgentsFileError as exc:\n"
        "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "PYTHONWARNINGS": "error"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("agents.toml, line 1 (agent 'w'): NatsAgent needs the NATS "
                                 "client")
    assert "pip install 'agent-reach[nats]'" in out.stdout
