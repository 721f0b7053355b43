"""The Phrases tab (issue 30: operators list and remove learned phrases in the dashboard):
key 6 reads what intent routing learned from callers' choices, newest first; `x` forgets the
selected phrase after a yes; `r` reads again. On a scripted feed, then on a real coordinator
that learned a phrase from a real caller's choice."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard import ReachDashboard, sample
from dashboard.feed import CommandFailed, FeedClosed, FeedConnection, connect
from dashboard.screens import ConfirmScreen
from dashboard.views.phrases import PhrasesView
from dashboard.views.status import StatusLine
from reach import NoRoute
from reach.core.backoff import Backoff
from reach.testing import Cluster, wait_until

SIZE = (120, 36)


class Book:
    """A coordinator's learned phrases as the scripted feed answers for them: forgetting one
    removes it, so the next read shows the change."""

    def __init__(self) -> None:
        self.phrases = [dict(p) for p in sample.PHRASES]
        self.refuse = False

    def reply(self, action: str, args: dict[str, Any]) -> Any:
        if action == "phrases" and self.refuse:
            raise CommandFailed("unauthorized", "the admin token may not read phrases")
        if action == "phrases":
            return {"phrases": [dict(p) for p in self.phrases]}
        if action == "forget_phrase":
            found = next((p for p in self.phrases if p["text"] == args["text"]), None)
            if found is None:
                return {"forgotten": False, "text": args["text"]}
            self.phrases.remove(found)
            return {"forgotten": True, **found}
        return sample.sample_reply(action, args)


def app_on(feed: sample.ScriptedFeed) -> ReachDashboard:
    async def once(url: str, token: str) -> FeedConnection:
        return feed

    return ReachDashboard(url="ws://test", token="t", connector=once)


def shown(app: ReachDashboard) -> list[tuple[str, str, str]]:
    table = app.query_one(PhrasesView).table
    return [tuple(cell.plain for cell in table.get_row(key)[:3])  # type: ignore[misc]
            for key in table.keys]


def caption(app: ReachDashboard) -> str:
    return str(app.query_one(PhrasesView).query_one("#caption").render())


def reads(feed: sample.ScriptedFeed) -> int:
    return sum(1 for action, _ in feed.commands if action == "phrases")


async def test_key_6_reads_the_learned_phrases_newest_first() -> None:
    feed = sample.ScriptedFeed(reply=Book().reply)
    app = app_on(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        assert reads(feed) == 0  # read when the tab opens, not before
        await pilot.press("6")
        await wait_until(lambda: len(shown(app)) == 3)
        assert shown(app) == [
            ("move 40 units to the north warehouse", "stock.transfer", "ops-console"),
            ("where is my refund at", "refund.status", "support-bot"),
            ("has the refund for 1182 gone through", "refund.status", "support-bot")]
        assert caption(app) == "3 learned phrases"
        row = app.query_one(PhrasesView).table.get_row(app.query_one(PhrasesView).table.keys[0])
        assert row[3].plain == "12m00s ago"  # against the feed's clock
        await pilot.press("slash", *"cap:refund", "enter")
        assert [r[0] for r in shown(app)] == ["where is my refund at",
                                              "has the refund for 1182 gone through"]


async def test_x_forgets_the_selected_phrase_after_a_yes_and_reads_again() -> None:
    book = Book()
    feed = sample.ScriptedFeed(reply=book.reply)
    app = app_on(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("6")
        await wait_until(lambda: len(shown(app)) == 3)
        await pilot.press("down", "x")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # no: nothing sent
        assert not [c for c in feed.commands if c[0] == "forget_phrase"]
        await pilot.press("x", "y")
        await wait_until(lambda: len(shown(app)) == 2)
        assert ("forget_phrase", {"text": "where is my refund at"}) in feed.commands
        assert "where is my refund at" not in [r[0] for r in shown(app)]
        status = app.query_one(StatusLine)
        assert status.note == "forgot “where is my refund at” → refund.status"


async def test_a_refused_read_is_said_in_the_caption_and_r_reads_again() -> None:
    book = Book()
    book.refuse = True
    feed = sample.ScriptedFeed(reply=book.reply)
    app = app_on(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("6")
        await wait_until(lambda: "may not read" in caption(app))
        assert caption(app) == "learned phrases: the admin token may not read phrases"
        await pilot.press("x")  # nothing to forget: a warning, no command, no question
        assert not isinstance(app.screen, ConfirmScreen)
        book.refuse = False
        await pilot.press("r")
        await wait_until(lambda: caption(app) == "3 learned phrases")


@pytest.mark.parametrize("reply, said", [
    (lambda action, args: {"phrases": []},
     "no learned phrases: a caller who picks one of a refusal's suggestions (choose=) "
     "teaches one"),
    (lambda action, args: {"phrases": [{"capability": "x"}]},
     "learned phrases: not a phrases reply"),
])
async def test_an_empty_or_off_contract_reply(reply: Any, said: str) -> None:
    feed = sample.ScriptedFeed(reply=reply)
    app = app_on(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("6")
        await wait_until(lambda: caption(app) == said)


async def test_a_read_without_a_feed_says_so() -> None:
    tries = 0

    async def down(url: str, token: str) -> FeedConnection:
        nonlocal tries
        tries += 1
        raise FeedClosed("nothing listening")

    app = ReachDashboard(url="ws://test", token="t", connector=down, reconnect_base=5.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: tries == 1)
        await pilot.press("6")
        await wait_until(lambda: "not read" in caption(app))
        assert caption(app) == "learned phrases not read: not connected"


async def test_a_phrase_a_caller_taught_is_listed_and_forgotten_on_a_real_coordinator(
) -> None:
    cluster = await Cluster.start(admin_token="t", backoff=Backoff(base=0.005, jitter=0.0),
                                  suspect_after=20, offline_after=40)
    try:
        catalogue = {
            "returns.rate": dict(intents=["return rate"], tags=["returns"]),
            "refund.issue": dict(intents=["refund the customer"], tags=["refund"]),
        }

        async def rate() -> str:
            return "4 %"

        async def refund(order: str = "") -> str:
            return f"refunded {order}"

        await cluster.add_agent("ops", {"returns.rate": rate, "refund.issue": refund},
                                each=catalogue)
        client = await cluster.client(caller="amy")
        blurry = "the customer sent it back, sort out the money"
        with pytest.raises(NoRoute):
            await client.call_intent(blurry, {"order": "A1"})
        await client.call_intent(blurry, {"order": "A1"}, choose="refund.issue")
        app = ReachDashboard(url=cluster.url, token="t", connector=connect)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(lambda: app.model.frames >= 1)
            await pilot.press("6")
            await wait_until(lambda: shown(app) == [(blurry, "refund.issue", "amy")])
            await pilot.press("x", "y")
            await wait_until(lambda: shown(app) == [])
        assert cluster.reach.learned_phrases() == []
        with pytest.raises(NoRoute):  # routed by evidence again: refused
            await client.call_intent(blurry, {"order": "A2"})
    finally:
        await cluster.close()
