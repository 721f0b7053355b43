"""Tests that pin behaviour of reach/core/reasons.py which the mutation run showed unpinned.

Each test says what behaviour it pins and why a user would notice if it changed.
"""

from __future__ import annotations

import pytest
from test_routing import CAP, GOOD

from reach.core.reasons import no_route
from reach.core.routing import Router
from reach.errors import NoRoute


def test_unknown_name_with_suggestions_offers_at_most_three_in_the_message() -> None:
    """A caller who mistypes a capability reads "did you mean" with the closest names (best
    first, at most three) in the message itself, not only in ``details``."""
    assert no_route("sales.querry", None, ["sales.query", "sales.queue", "sales.quota",
                                           "sales.quiet"]) == (
        "no agent declares 'sales.querry'; did you mean 'sales.query' or 'sales.queue' or "
        "'sales.quota'?")
    assert no_route("sales.querry", None, ["sales.query"]) == (
        "no agent declares 'sales.querry'; did you mean 'sales.query'?")


def test_unknown_name_without_suggestions_says_what_to_do() -> None:
    """With nothing close to suggest, the caller is told to check the name or connect an
    agent, rather than being offered an empty "did you mean"."""
    assert no_route("zzz", None, []) == (
        "no agent declares 'zzz'; check the name or connect an agent that offers it")


@pytest.mark.parametrize(("typed", "asked"), [
    (None, "'sales.query'"),                                  # not given: the name as read
    ("sales.query", "'sales.query'"),                         # typed as read: said once
    ("Sales.Query ", "'Sales.Query ' (read as 'sales.query')"),  # normalised: both shown
])
def test_the_name_is_quoted_as_typed_and_as_read_only_when_they_differ(
        typed: str | None, asked: str) -> None:
    """The message quotes what the caller typed; only when the coordinator read it as another
    name does it add "(read as ...)", so a caller sees why a look-alike did not match."""
    assert no_route("sales.query", typed, []) == (
        f"no agent declares {asked}; check the name or connect an agent that offers it")
    assert no_route("sales.query", typed, ["sales.quota"]).startswith(
        f"no agent declares {asked}; did you mean 'sales.quota'?")


def test_admit_raises_no_route_whose_message_is_the_sentence() -> None:
    """What a remote caller reads for an undeclared capability is this sentence, with the
    suggestions the router found (through ``Router.admit``, the one caller)."""
    with pytest.raises(NoRoute) as info:
        Router().admit("inventory.querry", GOOD, "alice", {}, [CAP, "hr.hire"])
    assert str(info.value) == no_route("inventory.querry", None, [CAP])
    assert "did you mean 'inventory.query'?" in str(info.value)
