"""The alert rules file (reach.alert_rules): what it builds, and every mistake named with its
line and what to change, before a coordinator starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reach.alert_rules import AlertConfig, AlertsFileError, Webhook, load_alerts, parse_alerts
from reach.core import alerts as al
from reach.core.backoff import Backoff

DOC = Path(__file__).resolve().parent.parent / "docs" / "alerts.md"
HOOK = '[[webhook]]\nname = "h"\nurl = "http://127.0.0.1:9/x"\n'


def bad(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(AlertsFileError) as info:
        parse_alerts(text, "a.toml", env or {})
    return str(info.value)


def test_the_documented_example_file_loads() -> None:
    block = re.search(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    config = parse_alerts(block.group(1), "docs", {"ONCALL_TOKEN": "s3cret"})
    assert {r.kind for r in config.rules} == set(al.KINDS)
    assert config.webhooks and dict(config.webhooks[0].headers)["Authorization"] == (
        "Bearer s3cret")


def test_a_full_file_builds_rules_and_webhooks() -> None:
    config = parse_alerts('''
[alerts]
interval = 0.5
queue = 10

[[webhook]]
name = "oncall"
url = "https://hooks.example.com/reach"
headers = { Authorization = "Bearer ${T}", X-Cost = "$$5" }
timeout = 2
attempts = 3
backoff = { base = 0.01, cap = 0.1, factor = 3, jitter = 0.5 }

[[webhook]]
name = "log"
url = "http://127.0.0.1:9000/"

[[rule]]
name = "letters"
kind = "dead_letters"
threshold = 5
window = 30
capability = ["orders.*"]
agent = "w1"
for = 1
clear_for = 60
notify = ["oncall"]

[[rule]]
name = "slow"
kind = "p95_latency"

[[rule]]
name = "nobody"
kind = "no_agent"
capability = "ledger.write"
''', "a.toml", {"T": "tok"})
    assert config == AlertConfig(
        rules=(al.Rule("letters", al.DEAD_LETTERS, 5.0, hold=1.0, clear_for=60.0, window=30.0,
                       capabilities=("orders.*",), agents=("w1",), notify=("oncall",)),
               al.Rule("slow", al.P95_LATENCY, None, hysteresis=0.1),
               al.Rule("nobody", al.NO_AGENT, None, capabilities=("ledger.write",))),
        webhooks=config.webhooks, interval=0.5, queue=10)
    oncall, log = config.webhooks
    assert oncall.headers == (("Authorization", "Bearer tok"), ("X-Cost", "$5"))
    assert (oncall.timeout, oncall.attempts) == (2.0, 3)
    assert oncall.backoff == Backoff(base=0.01, factor=3.0, cap=0.1, jitter=0.5, mode="below")
    assert (log.timeout, log.attempts, log.headers) == (5.0, 5, ())
    assert log.backoff == Backoff(mode="below")


def test_defaults_of_an_empty_alerts_table() -> None:
    config = parse_alerts('[[rule]]\nname = "b"\nkind = "breaker_open"\nthreshold = 1\n', "a", {})
    assert (config.interval, config.queue, config.webhooks) == (1.0, 1000, ())
    assert config.rules[0] == al.Rule("b", al.BREAKER_OPEN, 1.0)


def test_load_reads_a_file_and_names_an_unreadable_one(tmp_path: Path) -> None:
    path = tmp_path / "alerts.toml"
    path.write_text('[[rule]]\nname = "n"\nkind = "no_agent"\n')
    assert load_alerts(path).rules[0].kind == al.NO_AGENT
    with pytest.raises(AlertsFileError, match=r"missing\.toml: cannot read it"):
        load_alerts(tmp_path / "missing.toml")


@pytest.mark.parametrize("text,expected", [
    ("[[rule]\n", r"a\.toml: not valid TOML"),
    ("rules = 1\n", r"unknown top-level key\(s\) \['rules'\]"),
    ("alerts = 1\n[[rule]]\nname='n'\nkind='no_agent'\n", r"alerts must be a table"),
    ("[alerts]\nevery = 1\n", r"\[alerts\]: unknown key\(s\) \['every'\]"),
    ("[alerts]\ninterval = 0\n", r"\[alerts\]: interval = 0: expected a positive number"),
    ("[alerts]\nqueue = 0\n", r"queue = 0: expected a whole number >= 1"),
    ("[alerts]\nqueue = true\n", r"queue = True: expected a whole number"),
    ("", r"no \[\[rule\]\] tables; see docs/alerts\.md"),
    ("rule = 3\n", r"rule must be \[\[rule\]\] tables"),
    ("rule = [3]\n", r"a\.toml, rule #1: expected a \[\[rule\]\] table, not 3"),
    ("\n\n[[rule]]\nkind = 'no_agent'\n", r"line 3: every \[\[rule\]\] needs name"),
    ("[[rule]]\nname = 'x'\nkind = 'cpu'\n",
     r"line 1 \(rule 'x'\): kind = 'cpu': expected one of \['dead_letters', 'breaker_open'"),
    ("[[rule]]\nname = 'x'\nkind = 'no_agent'\nagent = 'a'\n",
     r"unknown key\(s\) \['agent'\] for a no_agent rule; allowed: \["),
    ("[[rule]]\nname = 'x'\nkind = 'breaker_open'\n",
     r"a breaker_open rule needs threshold = N \(seconds\)"),
    ("[[rule]]\nname = 'x'\nkind = 'dead_letters'\n",
     r"a dead_letters rule needs threshold = N \(dead letters per window\)"),
    ("[[rule]]\nname = 'x'\nkind = 'breaker_open'\nthreshold = 0\n",
     r"threshold = 0: expected a positive number"),
    ("[[rule]]\nname = 'x'\nkind = 'dead_letters'\nthreshold = -1\n",
     r"threshold = -1: expected a number >= 0"),
    ("[[rule]]\nname = 'x'\nkind = 'p95_latency'\nthreshold = 'fast'\n",
     r"threshold = 'fast': expected a positive number"),
    ("[[rule]]\nname = 'x'\nkind = 'p95_latency'\nthreshold = nan\n", r"threshold = nan"),
    ("[[rule]]\nname = 'x'\nkind = 'p95_latency'\nhysteresis = 1\n",
     r"hysteresis = 1\.0: a share below 1"),
    ("[[rule]]\nname = 'x'\nkind = 'no_agent'\nfor = true\n", r"for = True: expected a number"),
    ("[[rule]]\nname = 'x'\nkind = 'no_agent'\ncapability = ['a', 3]\n",
     r"capability must be a name or a list of names"),
    ("[[rule]]\nname = 'x'\nkind = 'no_agent'\ncapability = ''\n", r"capability must be"),
    ("[[rule]]\nname = 'x'\nkind = 'dead_letters'\nthreshold = 1\nwindow = 0\n",
     r"window = 0: expected a positive number"),
    ("[[rule]]\nname = 'x'\nkind = 'no_agent'\nnotify = ['pager']\n",
     r"notify names undeclared webhook\(s\) \['pager'\]; declared: none"),
    (HOOK + "[[rule]]\nname = 'x'\nkind = 'no_agent'\nnotify = ['h', 'p']\n",
     r"line 4 \(rule 'x'\): notify names undeclared webhook\(s\) \['p'\]; declared: \['h'\]"),
    ("[[rule]]\nname = 'x'\nkind = 'no_agent'\n[[rule]]\nname = 'x'\nkind = 'no_agent'\n",
     r"rule name\(s\) \['x'\] declared twice"),
    (HOOK + HOOK, r"webhook name\(s\) \['h'\] declared twice"),
    ("[[webhook]]\nurl = 'http://a/'\n", r"line 1: every \[\[webhook\]\] needs name"),
    ("[[webhook]]\nname = 'h'\nurl = 'ftp://a/'\n",
     r"line 1 \(webhook 'h'\): url = 'ftp://a/': expected an http:// or https:// URL"),
    ("[[webhook]]\nname = 'h'\nurl = 'http:///x'\n", r"with a host"),
    ("[[webhook]]\nname = 'h'\n", r"url = None"),
    ("[[webhook]]\nname = 'h'\nurl = 'http://a/'\nretries = 3\n",
     r"unknown key\(s\) \['retries'\]; allowed: \['attempts', 'backoff'"),
    ("[[webhook]]\nname = 'h'\nurl = 'http://a/'\nheaders = { A = 1 }\n",
     r"headers must be a table of strings"),
    ("[[webhook]]\nname = 'h'\nurl = 'http://a/'\nheaders = 'A: b'\n", r"headers must be"),
    ("[[webhook]]\nname = 'h'\nurl = 'http://a/'\nbackoff = { delay = 1 }\n",
     r"backoff must be a table with keys among \['base', 'cap', 'factor', 'jitter'\]"),
    ("[[webhook]]\nname = 'h'\nurl = 'http://a/'\nbackoff = 1\n", r"backoff must be a table"),
    ("[[webhook]]\nname = 'h'\nurl = 'http://a/'\nbackoff = { jitter = 2 }\n",
     r"\(webhook 'h'\): backoff: Backoff jitter below the nominal delay must be in \[0, 1\]"),
    ("[[webhook]]\nname = 'h'\nurl = 'http://a/'\nbackoff = { base = -1 }\n",
     r"base = -1: expected a number >= 0"),
    ("[[webhook]]\nname = 'h'\nurl = 'http://a/'\ntimeout = 0\n", r"timeout = 0"),
    ("[[webhook]]\nname = 'h'\nurl = 'http://a/'\nattempts = 1.5\n", r"attempts = 1\.5"),
    ("[[webhook]]\nname = 'h'\nurl = 'http://${HOST}/'\n",
     r"environment variable HOST is not set \(used as \$\{HOST\}\)"),
])
def test_every_mistake_is_named(text: str, expected: str) -> None:
    assert re.search(expected, bad(text)), bad(text)


def test_a_table_past_the_lines_found_is_named_by_its_number() -> None:
    # An inline array of tables has no [[rule]] header line to point at.
    msg = bad('rule = [{ name = "a", kind = "no_agent" }, { name = "b", kind = "x" }]\n')
    assert msg.startswith("a.toml, rule #2 (rule 'b'): kind = 'x'")


def test_env_expansion_reaches_lists_and_keeps_other_values() -> None:
    config = parse_alerts('[[webhook]]\nname = "h"\nurl = "http://${H}:9/"\ntimeout = 3\n'
                          '[[rule]]\nname = "n"\nkind = "no_agent"\n', "a", {"H": "10.0.0.1"})
    assert config.webhooks[0].url == "http://10.0.0.1:9/"


@pytest.mark.parametrize("kw,expected", [
    ({"rules": (al.Rule("a", al.NO_AGENT), al.Rule("a", al.NO_AGENT))}, "must be unique"),
    ({"rules": (al.Rule("a", al.NO_AGENT),),
      "webhooks": (Webhook("h", "http://a/"), Webhook("h", "http://b/"))}, "must be unique"),
    ({"rules": (al.Rule("a", "cpu"),)}, "rule 'a': kind 'cpu'"),
    ({"rules": (al.Rule("a", al.NO_AGENT, notify=("h",)),)}, r"notify \['h'\]"),
    ({"rules": (al.Rule("a", al.NO_AGENT),), "interval": 0}, "interval must be positive"),
    ({"rules": (al.Rule("a", al.NO_AGENT),), "queue": 0}, "queue at least 1"),
])
def test_a_configuration_built_in_code_is_checked_too(kw: dict[str, object],
                                                       expected: str) -> None:
    with pytest.raises(AlertsFileError, match=expected):
        AlertConfig(**kw)  # type: ignore[arg-type]
    ok = AlertConfig((al.Rule("a", al.NO_AGENT, notify=("h",)),), (Webhook("h", "http://a/"),))
    assert ok.rules[0].notify == ("h",)
