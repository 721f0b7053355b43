"""``Opening``: awaited, or used with ``async with``; a forgotten ``await`` says so."""

from __future__ import annotations

import pytest

from reach import Agent, Client
from reach.sdk.opening import Opening


class Door:
    def __init__(self) -> None:
        self.log: list[str] = []

    async def open(self) -> None:
        self.log.append("open")

    async def close(self) -> None:
        self.log.append("close")

    def opening(self) -> Opening[Door]:
        return Opening(self, self.open, self.close)


async def test_await_opens_and_returns_the_target_without_closing_it() -> None:
    door = Door()
    assert await door.opening() is door
    assert door.log == ["open"]


async def test_async_with_opens_then_closes_on_exit() -> None:
    door = Door()
    async with door.opening() as opened:
        assert opened is door
        assert door.log == ["open"]
    assert door.log == ["open", "close"]


async def test_async_with_closes_when_the_body_raises() -> None:
    door = Door()
    with pytest.raises(KeyError):
        async with door.opening():
            raise KeyError("boom")
    assert door.log == ["open", "close"]


async def test_a_failed_open_is_not_closed() -> None:
    door = Door()

    async def refuse() -> None:
        raise ConnectionError("no")

    with pytest.raises(ConnectionError):
        async with Opening(door, refuse, door.close):
            pass  # pragma: no cover - never entered
    assert door.log == []


async def test_nothing_opens_until_awaited() -> None:
    door = Door()
    door.opening()
    assert door.log == []


def test_a_forgotten_await_says_so() -> None:
    client = Client.connect("ws://127.0.0.1:1", caller="c")
    with pytest.raises(AttributeError) as caught:
        client.call  # noqa: B018 - the attribute access is the test
    message = str(caught.value)
    assert "did you forget `await`?" in message
    assert "'call'" in message and "Client" in message


def test_dunder_lookups_stay_plain_attribute_errors() -> None:
    opening = Door().opening()
    assert not hasattr(opening, "__len__")
    with pytest.raises(AttributeError) as caught:
        opening.__fspath__  # noqa: B018
    assert "await" not in str(caught.value)


def test_connect_returns_an_opening_of_the_sdk_object() -> None:
    agent = Agent("a")
    opening = agent.connect("ws://127.0.0.1:1")
    assert isinstance(opening, Opening)
    assert repr(opening) == "<Opening of Agent: await it or use async with>"
    assert isinstance(Client.connect("ws://127.0.0.1:1"), Opening)
