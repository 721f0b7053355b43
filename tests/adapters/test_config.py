"""Agents declared in a TOML file: the same arguments as the code, and every mistake named
with its file and line before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from reach import Client, Reach
from reach.adapters import AgentsFileError, load_agents, parse_agents
from reach.adapters import config as agents_config

from .test_attach import FAST, Scripted

GOOD = '''
# two agents of a kind the test registers
[[agent]]
kind = "scripted"
name = "first"
max_concurrency = 3

[agent.capabilities."echo.run"]
note = "${NOTE}"
idempotent = true
latency_ms = 300

[[agent]]
kind = "scripted"
name = "second"
capabilities = { "echo.run" = { note = "two" } }
'''


@pytest.fixture(autouse=True)
def scripted_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(agents_config.KINDS, "scripted", (__name__.rsplit(".", 1)[0]
                                                          + ".test_attach", "Scripted"))


def test_a_file_builds_the_agents_it_declares(tmp_path: Path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text(GOOD)
    first, second = load_agents(path, env={"NOTE": "from env"})
    assert isinstance(first, Scripted) and first.name == "first"
    assert first.max_concurrency == 3
    assert first.capabilities["echo.run"].how == {"note": "from env"}
    assert first.capabilities["echo.run"].spec.latency_ms == 300
    assert second.capabilities["echo.run"].how == {"note": "two"}


@pytest.mark.parametrize("text,message", [
    ("[[agent]]\nkind = 'scripted'\nname = 'a'\nbogus = 1\n",
     r"line 1 \(agent 'a'\): unknown key\(s\) \['bogus'\] for a scripted agent"),
    ("\n\n[[agent]]\nkind = 'nope'\nname = 'a'\n",
     r"line 3 \(agent 'a'\): kind = 'nope': expected one of"),
    ("[[agent]]\nkind = 'scripted'\nname = 'a'\n\n[[agent]]\nkind = 'scripted'\nname = 'a'\n",
     r"line 5 \(agent 'a'\): the name is declared twice \(first at line 1\)"),
    ("[[agent]]\nkind = 'scripted'\nname = 'a'\n[agent.capabilities.'echo.run']\n"
     "latency_ms = -5\n", r"line 1 \(agent 'a'\): agent 'a', capability 'echo.run': latency_ms"),
    ("[[agent]]\nkind = 'scripted'\nname = 'a'\nversion = '${MISSING}'\n",
     r"environment variable MISSING is not set"),
    ("[[agent]\nkind = 1\n", r"not valid TOML: .*line 1"),
    ("[server]\nport = 1\n", r"unknown top-level key\(s\) \['server'\]"),
    ("", r"no \[\[agent\]\] tables"),
])
def test_mistakes_are_named_with_their_line(text: str, message: str) -> None:
    with pytest.raises(AgentsFileError, match=message):
        parse_agents(text, "agents.toml", env={})


def test_an_unreadable_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(AgentsFileError, match="cannot read it"):
        load_agents(tmp_path / "missing.toml")


async def test_declared_agents_serve_through_a_coordinator() -> None:
    async with Reach.start(**FAST) as reach:
        for adapter in parse_agents(GOOD, env={"NOTE": "n"}):
            await reach.attach(adapter)
        assert [a["name"] for a in reach.agents()] == ["first", "second"]
        async with Client.connect(reach.url) as client:
            assert (await client.call("echo.run", {}))["how"] in ("n", "two")


def test_reach_serve_refuses_a_bad_file_before_starting(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from reach.cli import main
    path = tmp_path / "agents.toml"
    path.write_text("[[agent]]\nkind = 'http'\nname = 'orders'\nurl = 'http://127.0.0.1:9'\n"
                    "colour = 'blue'\n")
    db = tmp_path / "reach.db"
    assert main(["serve", "--port", "0", "--store", f"sqlite:///{db}",
                 "--agents", str(path)]) == 2
    err = capsys.readouterr().err
    assert "agents.toml, line 1 (agent 'orders'): unknown key(s) ['colour']" in err
    assert not db.exists()  # nothing was started


def test_the_readme_agents_file_is_valid() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    (agent,) = parse_agents(block, "README.md", env={"ORDERS_TOKEN": "t-1"})
    assert agent.kind == "http" and agent.name == "legacy-orders"
    assert agent.capabilities["orders.lookup"].how["path"] == "/lookup"
    assert agent.capabilities["orders.lookup"].spec.idempotent


def test_double_dollar_is_a_literal_dollar() -> None:
    (agent,) = parse_agents("[[agent]]\nkind = 'scripted'\nname = 'a'\n"
                            "version = '$${HOME} costs $$5, ${V}'\n", env={"V": "v1"})
    assert agent.version == "${HOME} costs $5, v1"
