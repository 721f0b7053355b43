"""Attack: OpenAPI documents that amplify when an HttpAgent is attached (issue 25, item 7).

Trial: one 1.5 MB component used by 200 operations was copied once per operation before the
8 KiB schema check (4.9 s of a frozen event loop, 1.25 GB); a 50,000-deep document made
``reach serve --agents`` exit with a traceback.

Now depth is checked before anything walks the document, each operation's schema is counted
while its references are expanded (refused as soon as it must be over the schema limit), the
work runs on a worker thread, and every refusal is one line. Scaled down so that today's main
fails these tests in about a second instead of taking a gigabyte.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from adapters.http_service import Seen, serving

from reach import Reach
from reach.adapters import openapi
from reach.adapters.http import HttpAgent

OPERATIONS = 200
DEEP = 50_000


def _big_component_doc(props: int = 4000) -> bytes:
    """One component of ``props`` properties (~150 KB), used by every operation."""
    big = {"type": "object", "properties": {
        f"field_{i:05d}": {"type": "string", "description": "x" * 8} for i in range(props)}}
    paths = {f"/op{i}": {"post": {"operationId": f"op{i}", "requestBody": {"content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Big"}}}}}}
        for i in range(OPERATIONS)}
    return json.dumps({"openapi": "3.0.3", "paths": paths,
                       "components": {"schemas": {"Big": big}}}).encode()


def _deep_doc(depth: int = DEEP) -> bytes:
    """A params schema nested ``depth`` levels (``items`` in ``items``...)."""
    schema = '{"type":"array","items":' * depth + '{"type":"string"}' + "}" * depth
    return ('{"openapi":"3.0.3","paths":{"/a":{"post":{"operationId":"a","requestBody":'
            '{"content":{"application/json":{"schema":' + schema + '}}}}}}}').encode()


@asynccontextmanager
async def document(body: bytes) -> AsyncIterator[str]:
    """A service whose /doc.json is ``body``; yields its URL."""
    async with serving() as svc:
        async def doc(req: Seen) -> Any:
            return 200, {"content-type": "application/json"}, body
        svc.routes["/doc.json"] = doc
        yield svc.url


class Stalls:
    """The longest the event loop went without running a 1 ms ticker."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(0.001)
            now = loop.time()
            self.worst = max(self.worst, now - last)
            last = now

    async def __aenter__(self) -> Stalls:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        await asyncio.sleep(0.005)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def test_a_component_used_by_every_operation_is_refused_without_a_stall() -> None:
    body = _big_component_doc()
    async with document(body) as url, Reach.start() as reach, Stalls() as stalls:
        agent = HttpAgent("bomb", url, openapi_url="/doc.json")
        with pytest.raises(ValueError) as err:
            await reach.attach(agent)
        assert reach.agents() == []
    # Before: every operation copied the component on the loop (~1 s here, 4.9 s in the trial)
    assert stalls.worst < 0.25, f"the loop stalled {stalls.worst:.3f} s"
    message = str(err.value)
    assert "\n" not in message and "POST /op0 (op0)" in message
    assert "over 8192 bytes once its $refs are expanded" in message


def test_expanding_costs_at_most_the_schema_limit_per_operation() -> None:
    body = _big_component_doc()
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="over 8192 bytes"):
            openapi.read(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the parsed document itself is ~10 × its bytes as Python objects; the copies are nothing
    assert peak < 20 * len(body), f"peak {peak >> 20} MiB for a {len(body) >> 10} KiB document"


def test_a_document_within_the_bounds_still_reads() -> None:
    table, skipped = openapi.read(_big_component_doc(props=40), max_schema_bytes=8192)
    assert len(table) == OPERATIONS and not skipped
    assert set(table["op7"]["params"]["$defs"]["Big"]["properties"]) == {
        f"field_{i:05d}" for i in range(40)}


@pytest.mark.parametrize("depth", [65, 2_000, DEEP])
async def test_a_deep_document_is_refused_in_one_line(depth: int) -> None:
    async with document(_deep_doc(depth)) as url, Reach.start() as reach:
        with pytest.raises(ValueError) as err:
            await reach.attach(HttpAgent("deep", url, openapi_url="/doc.json"))
    message = str(err.value)
    assert "\n" not in message and "nests deeper than 64 levels" in message
    assert message.startswith(f"agent 'deep': OpenAPI document {url}/doc.json: ")


async def test_serve_with_a_deep_document_prints_one_line_and_exits(tmp_path: Path) -> None:
    async with document(_deep_doc()) as url:
        agents = tmp_path / "agents.toml"
        agents.write_text(f'[[agent]]\nkind = "http"\nname = "deep"\nurl = "{url}"\n'
                          f'openapi_url = "/doc.json"\n')
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "reach.cli", "serve", "--port", "0", "--no-http",
            "--store", "sqlite://", "--agents", str(agents),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            _, err = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    text = err.decode()
    assert proc.returncode == 2, text
    assert "Traceback" not in text
    said = [t for t in text.splitlines() if t.startswith("reach:")]  # (beside its log lines)
    assert len(said) == 1, text
    line = said[0]
    assert line.startswith("reach: agent 'deep': OpenAPI document") and "nests deeper" in line
