"""``Opening``: what ``Agent.connect``, ``Client.connect`` and ``Reach.start`` return.

Await it for the opened object, or use it with ``async with`` to have it closed on the way out
(as ``websockets.connect`` does)::

    client = await Client.connect(url)           # open; close it yourself
    async with Client.connect(url) as client:    # open, and close on exit
        ...

Nothing happens until then: an ``Opening`` that is never awaited opens nothing. Used as if it
were the opened object (``Client.connect(url).call(...)``), it says that ``await`` is missing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

T = TypeVar("T")


class Opening(Generic[T]):
    """``target``, opened by ``await open()`` and closed by ``await close()``."""

    __slots__ = ("_target", "_open", "_close")

    def __init__(self, target: T, open: Callable[[], Awaitable[object]],
                 close: Callable[[], Awaitable[object]]) -> None:
        self._target = target
        self._open = open
        self._close = close

    def __await__(self) -> Generator[Any, None, T]:
        return self._opened().__await__()

    async def _opened(self) -> T:
        await self._open()
        return self._target

    async def __aenter__(self) -> T:
        return await self._opened()

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    def __repr__(self) -> str:
        return f"<Opening of {type(self._target).__name__}: await it or use async with>"

    # at run time only: mypy still flags the forgotten await itself
    if not TYPE_CHECKING:  # pragma: no branch — TYPE_CHECKING is always False at run time
        def __getattr__(self, name: str) -> NoReturn:
            kind = type(object.__getattribute__(self, "_target")).__name__
            if name.startswith("__"):
                raise AttributeError(name)
            raise AttributeError(
                f"an Opening of a {kind} has no attribute {name!r}: did you forget `await`? "
                f"(`x = await ....connect(...)`, or `async with ....connect(...) as x`)")
