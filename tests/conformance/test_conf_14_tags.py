"""docs/protocol.md §7 "Tags" and §5 ``submit.tags``: a capability's tags are ``key=value``
or plain strings; a submit's ``tags`` object keeps the task to agents declaring all of them;
none has them → ``no_route`` with ``details.available``, at once; bad tags → ``invalid_params``
or ``protocol_error`` before anything is stored."""

from __future__ import annotations

from docpage import section
from rawpeer import Peer, agent, answer, caller, submit

from reach import Reach

CAP = "conf.geo"


async def two_regions(reach: Reach) -> tuple[Peer, Peer]:
    eu = await agent(reach.url, "conf-eu", [{"name": CAP, "tags": ["region=eu", "gpu"]}])
    us = await agent(reach.url, "conf-us", [{"name": CAP, "tags": ["region=us"]}])
    return eu, us


def test_the_page_documents_submit_tags_and_the_matching_rule() -> None:
    tags = section("**Tags.**", "The `params` schema")
    assert '`{"region": "eu"}` | `"region=eu"`' in tags
    assert '`{"gpu": true}` | `"gpu"`, or `"gpu=<anything>"`' in tags
    assert "`no_route`" in tags and "`details.available`" in tags
    frame = section("### `submit` (C→R)", "### `accepted`")
    assert "| `tags` | object \\| null | null (any agent) |" in frame


async def test_a_tagged_submit_reaches_only_the_agent_declaring_the_tags(reach: Reach) -> None:
    eu, us = await two_regions(reach)
    boss = await caller(reach.url)
    for req_id in range(1, 6):
        await boss.send(submit(req_id, CAP, tags={"region": "us"}))
        invoke = await us.expect("invoke")
        await answer(us, invoke, "us")
        assert (await boss.outcome(req_id))["result"] == "us"
    await boss.send(submit(10, CAP, tags={"region": "eu", "gpu": True}))
    invoke = await eu.expect("invoke")
    assert "tags" not in invoke  # the agent is not told: it was chosen for them
    await answer(eu, invoke, "eu")
    assert (await boss.outcome(10))["result"] == "eu"
    await us.silent(0.05)


async def test_no_agent_with_the_tags_is_no_route_with_the_declared_tags(reach: Reach) -> None:
    eu, us = await two_regions(reach)
    boss = await caller(reach.url)
    await boss.send(submit(1, CAP, tags={"region": "ap"}))
    error = await boss.expect("error", id=1)
    assert error["error"]["code"] == "no_route"
    assert error["error"]["details"]["available"] == ["region=eu", "region=us"]
    assert error["error"]["details"]["tags"] == {"region": "ap"}
    await boss.send(submit(2, CAP, tags={"region": "us", "gpu": True}))  # all must match
    assert (await boss.expect("error", id=2))["error"]["code"] == "no_route"
    await eu.silent(0.05)
    await us.silent(0.01)


async def test_bad_tags_are_refused_with_a_stable_code(reach: Reach) -> None:
    await two_regions(reach)
    boss = await caller(reach.url)
    cases = [
        ({"region": False}, "invalid_params"),
        ({"a=b": "x"}, "invalid_params"),
        ({"region": 1}, "protocol_error"),
        ({"region": "x" * 101}, "protocol_error"),
        ({f"k{i}": "v" for i in range(17)}, "protocol_error"),
        (["region=eu"], "protocol_error"),
    ]
    for req_id, (tags, code) in enumerate(cases, 1):
        await boss.send(submit(req_id, CAP, tags=tags))
        error = await boss.expect("error", id=req_id)
        assert error["error"]["code"] == code, (tags, error)
    assert reach.gateway.live == {}


async def test_null_and_empty_tags_ask_for_nothing(reach: Reach) -> None:
    eu, us = await two_regions(reach)
    boss = await caller(reach.url)
    for req_id, tags in ((1, None), (2, {})):
        await boss.send(submit(req_id, CAP, tags=tags))
        done = False
        for peer in (eu, us):
            try:
                invoke = await peer.expect("invoke", timeout=0.3)
            except TimeoutError:
                continue
            await answer(peer, invoke, "ok")
            done = True
            break
        assert done
        assert (await boss.outcome(req_id))["result"] == "ok"
