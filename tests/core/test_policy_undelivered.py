"""An undelivered attempt keeps the adapter's own words (issue 25, item 15): "connection
refused by http://…" is what happened at an HTTP agent, not the websocket's "not
acknowledged"."""

from __future__ import annotations

from reach.core import policy
from reach.core.policy import Verdict
from reach.core.tasks import Outcome


def test_an_adapters_reason_is_the_attempts_error() -> None:
    got = policy.classify("undelivered", "POST /x: connection refused by http://h:1",
                          acked=False, caller_bound=False)
    assert got == Verdict(Outcome.UNDELIVERED, False, True,
                          "POST /x: connection refused by http://h:1")


def test_without_words_it_is_not_acknowledged() -> None:
    for payload in (None, "", {"message": "x"}, 3):
        got = policy.classify("undelivered", payload, acked=False, caller_bound=False)
        assert got == Verdict(Outcome.UNDELIVERED, False, True, "not acknowledged")
