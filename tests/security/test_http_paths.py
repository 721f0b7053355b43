"""Attack: path params that climb out of an HttpAgent's base path (issue 25, item 8).

Trial: an agent at ``http://host/api/v1`` with a capability at ``/a/{p}/{q}/end``, called with
``p = q = ".."``: the URL was normalized before it left (``/api/v1/a/../../end``) and the
service received ``/api/end`` — above the agent's base path, with the agent's credentials.

Now a param that is, or decodes to, a ``.`` or ``..`` segment (also behind a ``/`` or ``\\``
that some server would decode and split on, and through double encodings) is refused with
``invalid_params`` before anything is sent; a ``/`` inside a param is sent percent-encoded.
The refusal is an answer, not a fault: the agent's breaker does not move and a legitimate call
right after goes through.
"""

from __future__ import annotations

from typing import Any

import pytest
from adapters.http_service import Answer, Seen, js, serving

from reach import Client, Reach
from reach.adapters.http import HttpAgent
from reach.errors import InvalidParams

CLIMBS = ["..", ".", "%2e%2e", "%2E%2e", ".%2E", "%252e%252e", "..%2f..", "a/../..",
          "..\\..", "a/./b", "%2e%2e%2f%2e%2e", "%25252e%25252e"]
SAFE = {"a/b": "a%2Fb", "v1.2": "v1.2", "...": "...", ".hidden": ".hidden",
        "50%": "50%25", "a..b": "a..b"}


async def _seen_path(req: Seen) -> Answer:
    return js(200, {"path": req.path})


async def test_dot_segments_from_params_are_refused_and_never_sent() -> None:
    async with serving() as svc, Reach.start(heartbeat_interval=0.5) as reach:
        svc.routes["/api/v1/a"] = _seen_path
        await reach.attach(HttpAgent(
            "legacy", svc.url + "/api/v1",
            {"orders.walk": {"path": "/a/{p}/{q}/end", "idempotent": True}},
            headers={"Authorization": "Bearer agent-secret"}))
        async with Client.connect(reach.url, caller="mallory") as client:
            for bad in CLIMBS:
                with pytest.raises(InvalidParams, match="'.' or '..' segment"):
                    await client.call("orders.walk", {"p": bad, "q": bad}, timeout=2)
                with pytest.raises(InvalidParams):  # one of the two is enough
                    await client.call("orders.walk", {"p": "x", "q": bad}, timeout=2)
            assert svc.seen == [], [s.path for s in svc.seen]  # nothing left the coordinator
            for given, sent in SAFE.items():
                got: Any = await client.call("orders.walk", {"p": given, "q": "x"}, timeout=2)
                assert got == {"path": f"/api/v1/a/{sent}/x/end"}
        assert all(s.path.startswith("/api/v1/a/") for s in svc.seen)
        [view] = reach.agents()
        assert view["breaker"] == "closed" and view["state"] == "online"


def test_why_nothing_was_reached_is_said_in_http_words() -> None:
    import errno

    from reach.adapters.http_parts import unreachable
    assert unreachable("http://h:1", ConnectionRefusedError(errno.ECONNREFUSED, "refused")) \
        == "connection refused by http://h:1"
    assert unreachable("http://h:1", OSError(errno.EHOSTUNREACH, "No route to host")) \
        == "could not connect to http://h:1: No route to host"
