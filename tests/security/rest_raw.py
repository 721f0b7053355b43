"""Raw HTTP/1.1 on loopback for the REST front door's attack tests: what an attacker's socket
does (a head with no body, a body that never ends, nothing at all) is not something an HTTP
client library lets a test say."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import urlsplit

from reach import Reach


def port_of(reach: Reach) -> int:
    assert reach.http_url is not None
    port = urlsplit(reach.http_url).port
    assert port is not None
    return port


def head(method: str, path: str, headers: dict[str, Any] | None = None) -> bytes:
    """A request's head: the request line and headers, ended by the blank line."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def answer(reader: asyncio.StreamReader, timeout: float = 5.0
                 ) -> tuple[int, dict[str, str], Any]:
    """The next response: status, headers (lower-case names), the body as JSON when it is."""
    async with asyncio.timeout(timeout):
        status_line = await reader.readline()
        assert status_line.startswith(b"HTTP/1.1 "), status_line
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
    try:
        body: Any = json.loads(raw) if raw else None
    except ValueError:
        body = raw
    return int(status_line.split()[1]), headers, body


async def closed(reader: asyncio.StreamReader, timeout: float) -> bool:
    """Whether the coordinator closes the connection within ``timeout`` (what it still
    sends before closing is read and dropped); a reset counts as closed."""
    try:
        async with asyncio.timeout(timeout):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


def shut(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.transport.abort()
