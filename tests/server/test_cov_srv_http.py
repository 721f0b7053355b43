"""Plain HTTP on the coordinator's websocket port (reach/server/http.py): who may read
``/metrics``, and the websockets server's logger saying each message at most once a second."""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest
from websockets.server import ServerProtocol

from reach import Reach
from reach.server.http import Routes, Throttled


def _get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 (a loopback test URL)
        return r.status, r.headers["Content-Type"], r.read().decode()


async def test_metrics_answer_loopback_and_refuse_other_peers() -> None:
    async with Reach.start(metrics_public=False) as reach:
        http = reach.url.replace("ws://", "http://") + "/metrics?x=1"
        status, kind, text = await asyncio.to_thread(_get, http)  # from loopback: answered
        assert status == 200 and kind.startswith("text/plain") and "reach_" in text
        routes = Routes(reach.channel.services, reach.channel)
        request: Any = SimpleNamespace(path="/metrics")
        for address in (("10.1.2.3", 40000), None):  # another host; an address unknown
            peer: Any = SimpleNamespace(remote_address=address, respond=ServerProtocol().reject)
            response = routes(peer, request)
            assert response is not None and response.status_code == 403
            assert b"loopback peers only" in response.body


async def test_metrics_public_answers_any_peer() -> None:
    async with Reach.start(metrics_public=True) as reach:
        routes = Routes(reach.channel.services, reach.channel)
        peer: Any = SimpleNamespace(remote_address=("10.1.2.3", 40000),
                                    respond=ServerProtocol().reject)
        response = routes(peer, SimpleNamespace(path="/metrics"))  # type: ignore[arg-type]
        assert response is not None and response.status_code == 200
        assert response.headers["Content-Length"] == str(len(response.body))
        assert b"reach_" in response.body


def _throttled(every: float) -> tuple[Throttled, list[str]]:
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger(f"test.throttled.{id(seen)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(Keep())
    return Throttled(logger, every=every), seen


async def test_a_repeated_message_is_said_once_then_counted() -> None:
    log, seen = _throttled(every=0.05)
    for _ in range(3):
        log.warning("handshake failed: %s", "EMFILE")
    log.warning("another message")  # a different message is not held back
    assert seen == ["handshake failed: EMFILE", "another message"]
    await asyncio.sleep(0.06)
    log.warning("handshake failed: %s", "EMFILE")
    assert seen[-1] == "handshake failed: EMFILE (and 2 more like it in the last 0s)"
    log.debug("handshake failed: %s", "EMFILE")  # below the level: not even counted
    assert log._quiet == {}


def test_the_memory_of_messages_is_bounded() -> None:
    log, seen = _throttled(every=60.0)
    for n in range(1002):
        log.info(f"message {n}")
    assert len(seen) == 1002 and len(log._last) <= 1001  # cleared past 1000 distinct ones
    log.info("message 0")  # forgotten by the clear: said again
    assert seen[-1] == "message 0"


@pytest.mark.parametrize("path", ["/", "/ws?x=1"])
async def test_other_paths_go_on_to_the_websocket_handshake(path: str) -> None:
    async with Reach.start() as reach:
        routes = Routes(reach.channel.services, reach.channel)
        peer: Any = SimpleNamespace(remote_address=("127.0.0.1", 1),
                                    respond=ServerProtocol().reject)
        assert routes(peer, SimpleNamespace(path=path)) is None  # type: ignore[arg-type]
