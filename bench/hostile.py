#!/usr/bin/env python3
"""Hostile peers: each attack from the issue "Trust by default" against a fresh coordinator,
with the worst stall a legitimate call saw and the coordinator's peak RSS, next to a quiet
baseline measured in the same run.

    python bench/hostile.py                # every attack (~1 minute at most)
    python bench/hostile.py --quick        # small sizes, short windows (~10 s; a smoke run)
    python bench/hostile.py --only redos capture    # some rows (the quiet baseline is kept)
    python bench/hostile.py --list         # the rows, with what each one sends

Three kinds of process, all on 127.0.0.1:

    coordinators   one per row, forked by a *zygote* child that imported reach once (so a
                   fresh coordinator costs milliseconds, not an interpreter start); each does
                   ``Reach.start(store="sqlite://", ...)`` like ``reach serve``, and is
                   SIGKILLed when its row ends, frozen or not
    probe          a child with a reach.Agent serving ``probe.echo`` and a reach.Client calling
                   it back to back (each call capped at ``--probe-timeout``), and a thread
                   sampling the coordinator's RSS with psutil every 10 ms
    this process   the attacker: raw websockets clients speaking the frames of
                   docs/protocol.md, a sans-I/O client for the reader that never reads

A row runs the probe for the attack and a short tail after it; *worst* is its slowest
call, *stall* that minus the quiet row's median, *peak RSS* the largest sample, *+MB* that
against the quiet row's peak, *fails* the probe calls that erred or timed out, and *outcome*
what the attacker saw (``refused invalid_params 1008 in 2 ms``, ``no answer in 5 s``, ...).
Every attack is bounded in count and in time (``--window``): a coordinator frozen by an
attack shows as a long worst call and failures, never as a hung benchmark. Rows that need
identities (capture, cross-caller) run with tokens, and with serve rules where the
coordinator has them; an option this coordinator does not know is dropped and said so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import report
from harness import Child, ChildFailed, Launcher, say, serve_commands

HERE = Path(__file__).resolve()
SAMPLE_EVERY = 0.01  # RSS sampling period
MB = 1 << 20
TOKENS = {"tok-probe-agent": "probe-agent", "tok-probe-caller": "probe-caller",
          "tok-evil": "evil", "tok-mallory": "mallory"}
TOKEN_OF = {principal: token for token, principal in TOKENS.items()}
SERVES = {"probe-agent": ["probe.*"], "evil": ["evil.*"]}


@dataclass(frozen=True)
class Sizes:
    """How much each attack sends; ``window`` caps one attack, ``probe_timeout`` one call."""

    window: float = 5.0
    probe_timeout: float = 2.0
    tail: float = 0.3             # the probe keeps watching this long after an attack
    hold: float = 1.5             # how long the slow reader and the idle connections wait
    caps_one: int = 10_000        # capabilities in the one huge register
    flood_agents: int = 10        # ... and registers of caps_each capabilities
    caps_each: int = 1_000
    status_frames: int = 2_000
    pad_bytes: int = 450_000
    connections: int = 2_000
    submits: int = 50_000
    nesting: int = 100_000
    captured_calls: int = 40
    bomb_bytes: int = 1 << 20     # one compressed REST body (inflates ~1,000x)
    bombs: int = 2
    loris: int = 500              # REST sockets that never finish a request
    polls: int = 200              # long polls one caller holds (the door's request cap)
    letters: int = 300            # dead letters of letter_bytes of params each
    letter_bytes: int = 900_000


FULL = Sizes()
QUICK = Sizes(window=1.0, probe_timeout=0.5, tail=0.15, hold=0.3, caps_one=1_000, flood_agents=4,
              caps_each=250, status_frames=200, connections=300, submits=5_000,
              captured_calls=10, bomb_bytes=128 << 10, loris=100, polls=50, letters=40,
              letter_bytes=400_000)


# =====================================================================================
# the zygote and its coordinators
# =====================================================================================


def role_zygote(_: argparse.Namespace) -> None:
    """Import reach once, then fork a coordinator per ``spawn OPTIONS`` line. No loop and no
    thread runs here, so a fork copies nothing half-done. ``stop PID`` SIGKILLs one (after
    noting whether it had already died), stdin closing stops them all."""
    import reach.cli  # noqa: F401 - imported before forking, shared by every coordinator

    kids: set[int] = set()
    say("READY", os.getpid())
    for line in sys.stdin:
        words = line.split(maxsplit=1)
        if words and words[0] == "spawn":
            pid = os.fork()
            if pid == 0:
                _coordinator_process(json.loads(words[1]))
            kids.add(pid)
        elif words and words[0] == "stop":
            pid = int(words[1])
            kids.discard(pid)
            say("STOPPED", pid, _end(pid))
        elif words and words[0] == "quit":
            break
    for pid in kids:
        _end(pid)


def _end(pid: int) -> str:
    """``crashed(CODE)`` if it had exited by itself, else ``killed``; reaped either way."""
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        return f"crashed({os.waitstatus_to_exitcode(status)})"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "killed"


def _coordinator_process(spec: dict[str, Any]) -> None:
    """The forked child: serve until killed; never returns into the zygote's loop."""
    code = 1
    try:
        with open(os.devnull) as null:
            os.dup2(null.fileno(), 0)  # the zygote's commands are not ours
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        zygote = os.getppid()

        def orphaned() -> None:  # the zygote gone (even SIGKILLed): so are we
            while os.getppid() == zygote:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=orphaned, daemon=True).start()
        asyncio.run(_coordinate(spec["options"], spec.get("optional", [])))
        code = 0
    except Exception:
        traceback.print_exc()
    finally:
        os._exit(code)


async def _coordinate(options: dict[str, Any], optional: list[str]) -> None:
    import logging

    from reach import Reach
    from reach.cli import tune_gc

    logging.basicConfig(level=logging.ERROR)  # floods would log thousands of warnings
    for key in ("permissions", "serves"):
        if key in options:
            options[key] = {k: tuple(v) for k, v in options[key].items()}
    dropped: list[str] = []
    while True:
        try:
            reach = await Reach.start(**options)
            break
        except TypeError as exc:  # an option this version does not have
            unknown = [k for k in optional if k in options and repr(k) in str(exc)]
            if not unknown:
                say("SPAWNED", os.getpid(), "-", "-", f"n/a on this version: {exc}"[:150])
                return
            for key in unknown:
                del options[key]
                dropped.append(key)
    tune_gc()  # as `reach serve` does
    say("SPAWNED", os.getpid(), reach.url, reach.http_url or "-", ",".join(dropped) or "-")
    await asyncio.Event().wait()


# =====================================================================================
# the probe: a legitimate agent and caller, and the RSS sampler
# =====================================================================================


class Probe:
    """``probe.echo`` called back to back; each call's latency, its failures, and the
    coordinator's RSS every ``SAMPLE_EVERY`` seconds between ``start`` and ``stop``."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.agent: Any = None
        self.client: Any = None
        self.pid = 0
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.rss: list[int] = []
        self.last_ok = True
        self.begun = 0  # calls started (an invoke can be out before its call completes)
        self._loop_task: asyncio.Task[None] | None = None
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None

    async def attach(self, url: str, pid: int, agent_token: str | None,
                     caller_token: str | None) -> None:
        from reach import Agent, Client

        self.pid = pid
        agent = Agent("probe-agent", token=agent_token, max_concurrency=32,
                      reconnect_base=0.05, reconnect_cap=0.2)

        @agent.capability("probe.echo", idempotent=True, latency_ms=50)
        async def echo(n: int) -> int:
            return n

        self.agent = agent
        async with asyncio.timeout(5):
            await agent.connect(url)
            self.client = await Client.connect(url, caller="probe-caller", token=caller_token,
                                               reconnect_for=self.timeout)
            for i in range(10):  # warm: routes, caches, the first commits
                await self.client.call("probe.echo", {"n": i}, timeout=self.timeout)

    async def detach(self) -> None:
        await self.stop()
        for closing in (self.client, self.agent):
            if closing is not None:
                with contextlib.suppress(Exception, TimeoutError):
                    async with asyncio.timeout(1.0):
                        await (closing.close() if closing is self.client
                               else closing.close(drain=0.1))
        self.client = self.agent = None

    def start(self) -> None:
        self.latencies, self.failures, self.rss, self.last_ok = [], [], [], True
        self._sampling.set()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        self._loop_task = asyncio.get_running_loop().create_task(self._calls())

    async def stop(self) -> dict[str, Any]:
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
            self._loop_task = None
        self._sampling.clear()
        if self._sampler is not None:
            self._sampler.join()
            self._sampler = None
        lat = self.latencies
        return {"calls": len(lat), "p50": statistics.median(lat) if lat else None,
                "worst": max(lat, default=None), "fails": len(self.failures),
                "first_failure": self.failures[0] if self.failures else None,
                "last_ok": self.last_ok,
                "rss_peak": max(self.rss, default=None)}

    async def secret(self, key: str, n: int) -> str:
        """A task of the probe caller's own, with a known key and result (for mallory)."""
        handle = await self.client.submit("probe.echo", {"n": n}, idempotency_key=key)
        await handle.result(timeout=self.timeout)
        return str(handle.task_id)

    async def _calls(self) -> None:
        n = 0
        while True:
            n += 1
            self.begun += 1
            started = time.perf_counter()
            try:
                async with asyncio.timeout(self.timeout):
                    got = await self.client.call("probe.echo", {"n": n}, timeout=self.timeout)
                if got != n:
                    raise ValueError(f"wrong answer {got!r} for {n}")
            except TimeoutError:
                self.failures.append(f"no answer within {self.timeout:g} s")
                self.last_ok = False
            except Exception as exc:  # kept: the row reports it
                self.failures.append(f"{type(exc).__name__}: {exc}"[:120])
                self.last_ok = False
            else:
                self.last_ok = True
            self.latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.001)

    def _sample(self) -> None:
        import psutil

        try:
            proc = psutil.Process(self.pid)
            while self._sampling.is_set():
                self.rss.append(proc.memory_info().rss)
                time.sleep(SAMPLE_EVERY)
        except psutil.Error:  # the coordinator died: the samples so far stand
            pass


async def role_probe(args: argparse.Namespace) -> None:
    probe = Probe(args.probe_timeout)

    async def handle(words: list[str]) -> None:
        if words[0] == "attach":  # attach URL PID AGENT_TOKEN CALLER_TOKEN ('-': none)
            tokens = [None if w == "-" else w for w in words[3:5]]
            await probe.attach(words[1], int(words[2]), tokens[0], tokens[1])
            say("ATTACHED")
        elif words[0] == "start":
            probe.start()
            say("STARTED")
        elif words[0] == "count":
            say("CALLS", probe.begun)
        elif words[0] == "stop":
            say("RESULT", json.dumps(await probe.stop()))
        elif words[0] == "secret":  # secret KEY N
            say("SECRET", await probe.secret(words[1], int(words[2])))
        elif words[0] == "detach":
            await probe.detach()
            say("DETACHED")
        else:
            say("ERR", "unknown-command", words[0])

    say("READY")
    try:
        await serve_commands(handle)
    finally:
        await probe.detach()


# =====================================================================================
# the attacker's clients
# =====================================================================================


def took(started: float) -> str:
    s = time.perf_counter() - started
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def kind(frame: dict[str, Any] | None, close_code: int | None = None) -> str:
    """``welcome``, ``accepted``, an error's code, ``closed 1008`` ..."""
    if frame is None:
        return f"closed {close_code}" if close_code else "closed"
    if frame.get("type") == "error":
        return str((frame.get("error") or {}).get("code", "error"))
    return str(frame.get("type"))


async def dial(url: str) -> Any:
    from websockets.asyncio.client import connect

    return await connect(url, max_size=None, compression=None, open_timeout=2,
                         ping_interval=None, close_timeout=0.2, proxy=None)


async def next_frame(ws: Any) -> dict[str, Any] | None:
    from websockets.exceptions import ConnectionClosed

    try:
        frame: dict[str, Any] = json.loads(await ws.recv())
    except ConnectionClosed:
        return None
    return frame


async def _close(ws: Any, abort: bool) -> None:
    """A clean close, or (the window ran out: the coordinator may be frozen) an abort."""
    if abort:
        ws.transport.abort()
        return
    with contextlib.suppress(Exception, TimeoutError):
        async with asyncio.timeout(0.2):
            await ws.close()


async def first_frame(ws: Any, frame: dict[str, Any] | str) -> tuple[dict[str, Any] | None, str]:
    """Send the session's first frame: (its answer, ``welcome in 3 ms`` or ``refused
    invalid_params 1008 in 2 ms``)."""
    started = time.perf_counter()
    await ws.send(frame if isinstance(frame, str) else json.dumps(frame))
    answer = await next_frame(ws)
    when = took(started)
    if answer is not None and answer.get("type") == "error":
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await ws.wait_closed()
        code = f" {ws.close_code}" if ws.close_code else ""
        return answer, f"refused {kind(answer)}{code} in {when}"
    return answer, f"{kind(answer, ws.close_code)} in {when}"


class RawAgent:
    """A hand-written agent: registers ``caps`` and answers every invoke with its ``n``,
    counting the invokes per capability. ``async with`` owns its reader and socket."""

    def __init__(self, url: str, name: str, caps: list[dict[str, Any]],
                 token: str | None = None) -> None:
        self.url, self.name, self.caps, self.token = url, name, caps, token
        self.ws: Any = None
        self.welcome: dict[str, Any] | None = None
        self.outcome = ""
        self.invokes: Counter[str] = Counter()
        self.frames: list[dict[str, Any]] = []  # what came that was not an invoke
        self.heard = asyncio.Event()  # set by each of them, and by the socket closing
        self._reader: asyncio.Task[None] | None = None

    @property
    def welcomed(self) -> bool:
        return self.welcome is not None and self.welcome.get("type") == "welcome"

    async def __aenter__(self) -> RawAgent:
        self.ws = await dial(self.url)
        frame = {"v": 1, "type": "register", "name": self.name, "token": self.token,
                 "capabilities": self.caps}
        self.welcome, self.outcome = await first_frame(self.ws, frame)
        if self.welcomed:
            self._reader = asyncio.get_running_loop().create_task(self._serve())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        await _close(self.ws, exc[0] is not None)

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(json.dumps({"v": 1, **frame}))

    def mute(self) -> None:
        """Stop reading: invokes are left unanswered (or read by the caller's own loop)."""
        if self._reader is not None:
            self._reader.cancel()

    async def _serve(self) -> None:
        try:
            while (frame := await next_frame(self.ws)) is not None:
                if frame.get("type") != "invoke":
                    self.frames.append(frame)
                    self.heard.set()
                    continue
                self.invokes[frame.get("capability", "")] += 1
                params = frame.get("params") or {}
                await self.send({"type": "result", "task_id": frame["task_id"],
                                 "attempt": frame.get("attempt", 0), "result": params.get("n")})
        finally:
            self.heard.set()


class RawCaller:
    """A hand-written caller: ``ask`` sends one request and reads to its final answer."""

    def __init__(self, url: str, name: str = "attacker", token: str | None = None) -> None:
        self.url, self.name, self.token = url, name, token
        self.ws: Any = None
        self.outcome = ""
        self._ids = 0

    async def __aenter__(self) -> RawCaller:
        self.ws = await dial(self.url)
        welcome, self.outcome = await first_frame(
            self.ws, {"v": 1, "type": "hello", "caller": self.name, "token": self.token})
        if kind(welcome) != "welcome":
            raise ConnectionError(f"caller {self.name!r}: {self.outcome}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await _close(self.ws, exc[0] is not None)

    async def ask(self, frame: dict[str, Any] | str) -> tuple[list[dict[str, Any]], str]:
        """Every frame answering this request (``accepted`` and the outcome, or one error),
        and ``invalid_params in 2 ms``. A str is sent as it is, with ``"id": 1``."""
        self._ids += 1
        req = 1 if isinstance(frame, str) else self._ids
        text = frame if isinstance(frame, str) else json.dumps({"v": 1, "id": req, **frame})
        waits = '"wait": false' not in text and '"submit"' in text
        started = time.perf_counter()
        await self.ws.send(text)
        got: list[dict[str, Any]] = []
        while (answer := await next_frame(self.ws)) is not None:
            if answer.get("id") not in (req, None):
                continue
            got.append(answer)
            if not (waits and answer.get("type") == "accepted"):
                return got, f"{kind(answer)} in {took(started)}"
        return got, f"{kind(None, self.ws.close_code)} in {took(started)}"


def client_frame(payload: bytes, opcode: int = 1) -> bytes:
    """One masked client frame, built by hand (mask key zero: valid, and free to apply)."""
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    elif n < 1 << 16:
        head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"\0\0\0\0" + payload


class RawSocket:
    """A websocket over asyncio streams that reads only when asked to: websockets' sans-I/O
    ``ClientProtocol`` parses, the transport can be paused (then the kernel's small receive
    buffer fills and the coordinator's writes back up), and frames go out pre-built."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 proto: Any) -> None:
        self.reader, self.writer, self.proto = reader, writer, proto
        self.pending: deque[dict[str, Any]] = deque()
        self.eof = False

    @classmethod
    async def open(cls, url: str, rcvbuf: int | None = None) -> RawSocket:
        from websockets.client import ClientProtocol
        from websockets.protocol import State
        from websockets.uri import parse_uri

        uri = parse_uri(url)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (uri.host, uri.port))
        reader, writer = await asyncio.open_connection(sock=sock)
        proto = ClientProtocol(uri, max_size=None)
        proto.send_request(proto.connect())
        raw = cls(reader, writer, proto)
        raw.writer.write(b"".join(proto.data_to_send()))
        while proto.state is State.CONNECTING:
            data = await reader.read(65536)
            if not data:
                raise ConnectionError("closed during the handshake")
            proto.receive_data(data)
        if proto.handshake_exc is not None:
            raise proto.handshake_exc
        proto.events_received()  # the handshake response
        return raw

    def send(self, frame: dict[str, Any]) -> None:
        self.writer.write(client_frame(json.dumps({"v": 1, **frame}).encode()))

    async def recv(self) -> dict[str, Any] | None:
        from websockets.frames import Opcode

        while not self.pending:
            if self.eof or self.proto.close_rcvd is not None:
                return None
            data = await self.reader.read(1 << 20)
            if not data:
                self.eof = True
                continue
            self.proto.receive_data(data)
            for event in self.proto.events_received():
                if getattr(event, "opcode", None) is Opcode.TEXT:
                    self.pending.append(json.loads(event.data))
        return self.pending.popleft()

    @property
    def close_code(self) -> int | None:
        return self.proto.close_rcvd.code if self.proto.close_rcvd is not None else None

    def pause(self) -> None:
        cast(asyncio.Transport, self.writer.transport).pause_reading()

    def resume(self) -> None:
        cast(asyncio.Transport, self.writer.transport).resume_reading()

    def abort(self) -> None:
        self.writer.transport.abort()


# =====================================================================================
# the attacks
# =====================================================================================


@dataclass
class Ctx:
    """What an attack gets: the coordinator's URL, the sizes, the probe (to count its calls
    or give it a task), and the notes it leaves: together they are the row's outcome."""

    url: str
    sizes: Sizes
    probe: Child
    http: str = "-"  # the REST door's "http://HOST:PORT" ("-": none)
    notes: list[str] = field(default_factory=list)
    last: list[str] = field(default_factory=list)  # notes from cleanups: said after the rest
    doing: str = ""  # the step in progress: names what got no answer when the window ends

    details: list[str] = field(default_factory=list)  # printed under the table

    def note(self, text: str) -> None:
        self.notes.append(text)

    def explain(self, frame: dict[str, Any] | None) -> None:
        """Keep an error frame's message for the notes under the table (escaped: it may
        quote a hostile name)."""
        if frame is not None and frame.get("type") == "error":
            error = frame.get("error") or {}
            message = json.dumps(str(error.get("message", "")))[1:-1]
            self.details.append(f"{error.get('code')}: {message[:160]}")

    async def probe_calls(self) -> int:
        """Probe calls started so far."""
        return int(await self.probe.request("count", "CALLS", 5))


def cap(name: str, params: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "params": params if params is not None else {"type": "object"},
            **extra}


async def quiet(ctx: Ctx) -> None:
    await asyncio.sleep(ctx.sizes.hold)
    ctx.note("no attack")


async def _register_then_submit(ctx: Ctx, spec: dict[str, Any], params: dict[str, Any],
                                agent: str, secret: str = "") -> None:
    """Register ``spec``, then (if welcomed) submit ``params`` to it; ``secret``: text that
    must not come back in any answer (a file's content)."""
    ctx.doing = "register"
    answers: list[dict[str, Any]] = []
    async with RawAgent(ctx.url, agent, [spec]) as raw:
        ctx.note(f"register: {raw.outcome}")
        ctx.explain(raw.welcome)
        answers.append(raw.welcome or {})
        if raw.welcomed:
            async with RawCaller(ctx.url) as caller:
                ctx.doing = "submit"
                got, outcome = await caller.ask({"type": "submit", "capability": spec["name"],
                                                 "params": params, "timeout": 2})
                answers += got
                ctx.note(f"submit: {outcome}")
                ctx.explain(got[-1] if got else None)
    if secret and secret in json.dumps(answers):
        ctx.note("the file's content came back in an answer")


async def remote_ref(ctx: Ctx) -> None:
    """A schema whose $ref points at a listener that accepts and never answers."""
    seen: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer)
        with contextlib.suppress(Exception):
            await reader.read()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await _register_then_submit(
            ctx, cap("ref.remote", {"$ref": f"http://127.0.0.1:{port}/s.json"}), {},
            "ref-agent")
    finally:
        ctx.last.append(f"listener saw {len(seen)} connection(s)")
        for writer in seen:
            writer.close()
        server.close()


async def file_ref(ctx: Ctx) -> None:
    try:
        secret = Path("/etc/hostname").read_text().strip()
    except OSError:
        secret = ""
    await _register_then_submit(ctx, cap("ref.file", {"$ref": "file:///etc/hostname"}),
                                {"x": 1}, "ref-agent", secret)


async def redos(ctx: Ctx) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
    await _register_then_submit(ctx, cap("redos.match", schema), {"s": "a" * 31 + "!"},
                                "redos-agent")


async def bad_regex(ctx: Ctx) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "(("}}}
    await _register_then_submit(ctx, cap("regex.bad", schema), {"s": "a"}, "regex-agent")


def _flood_caps(prefix: str, n: int) -> list[dict[str, Any]]:
    # A schema each, all different: no compile cache can share them.
    return [cap(f"{prefix}.c{i}", {"type": "object", "properties": {f"p{i}": {"type": "integer"}}})
            for i in range(n)]


async def reg_flood_one(ctx: Ctx) -> None:
    caps = _flood_caps("f", ctx.sizes.caps_one)
    size = len(json.dumps({"v": 1, "type": "register", "name": "flood", "capabilities": caps}))
    assert size < 1 << 20, f"the register frame is {size} bytes: over the 1 MiB frame limit"
    ctx.note(f"{len(caps):,} capabilities in one {size // 1024} KB register")
    async with RawAgent(ctx.url, "flood", caps) as raw:
        ctx.note(raw.outcome)
        ctx.explain(raw.welcome)
        await asyncio.sleep(ctx.sizes.tail)  # registered: does anything else slow down?


async def reg_flood_many(ctx: Ctx) -> None:
    n, each = ctx.sizes.flood_agents, ctx.sizes.caps_each
    ctx.note(f"{n} registers x {each:,} capabilities")
    started = time.perf_counter()
    async with contextlib.AsyncExitStack() as stack:
        agents = await asyncio.gather(*(
            stack.enter_async_context(RawAgent(ctx.url, f"flood-{i}", _flood_caps(f"f{i}", each)))
            for i in range(n)))
        seen = Counter(a.outcome.split(" in ")[0] for a in agents)
        ctx.note(", ".join(f"{k} x{v}" for k, v in seen.items()) + f", all in {took(started)}")
        await asyncio.sleep(ctx.sizes.tail)


async def capture(ctx: Ctx) -> None:
    """'evil' registers the probe's own capability, weight 1000, and answers its calls."""
    spec = cap("probe.echo", weight=1000, idempotent=True, latency_ms=1)
    async with RawAgent(ctx.url, "evil", [spec], token=TOKEN_OF["evil"]) as evil:
        ctx.note(f"evil: {evil.outcome}")
        ctx.explain(evil.welcome)
        if not evil.welcomed:
            return
        want = ctx.sizes.captured_calls
        first = await ctx.probe_calls()
        while True:
            got = evil.invokes["probe.echo"]  # before the count: it cannot exceed it
            if (made := await ctx.probe_calls() - first) >= want:
                break
            await asyncio.sleep(0.02)
        ctx.note(f"evil received {got} of {made} probe calls")


async def cross_caller(ctx: Ctx) -> None:
    """'mallory' reuses the probe caller's idempotency key, then asks for its task."""
    key, secret = os.urandom(8).hex(), 7_000_000 + int.from_bytes(os.urandom(2), "big")
    task_id = (await ctx.probe.request(f"secret {key} {secret}", "SECRET", 10)).strip()

    def leaked(frames: list[dict[str, Any]]) -> str:
        if str(secret) in json.dumps(frames):
            return "LEAKED the probe's result"
        last = frames[-1] if frames else None
        if last is not None and last.get("type") == "result":
            return f"got a result of its own ({last.get('result')!r})"
        return kind(last)

    async with RawCaller(ctx.url, "mallory", TOKEN_OF["mallory"]) as mallory:
        got, _ = await mallory.ask({"type": "submit", "capability": "probe.echo",
                                    "params": {"n": 0}, "idempotency_key": key, "timeout": 2})
        ctx.note(f"same key: {leaked(got)}")
        got, _ = await mallory.ask({"type": "status", "task_id": task_id})
        ctx.note(f"status: {leaked(got)}")
        got, _ = await mallory.ask({"type": "result", "task_id": task_id})
        ctx.note(f"result: {leaked(got)}")


async def slow_reader(ctx: Ctx) -> None:
    """A caller asks for a ~450 KB task's status thousands of times and never reads."""
    n, pad = ctx.sizes.status_frames, ctx.sizes.pad_bytes
    raw = await RawSocket.open(ctx.url, rcvbuf=16384)
    try:
        raw.send({"type": "hello", "caller": "slow-reader"})
        if kind(await raw.recv()) != "welcome":
            ctx.note(f"hello: {kind(None, raw.close_code)}")
            return
        raw.send({"type": "submit", "id": 1, "capability": "probe.echo",
                  "params": {"n": 1, "pad": "x" * pad}})
        while (frame := await raw.recv()) is not None and frame.get("type") == "accepted":
            task_id = frame["task_id"]
        if frame is None or frame.get("type") != "result":
            ctx.note(f"submit: {kind(frame, raw.close_code)}")
            return
        raw.pause()
        started = time.perf_counter()
        with contextlib.suppress(ConnectionError):
            for i in range(n):
                raw.send({"type": "status", "id": 100 + i, "task_id": task_id})
                if i % 100 == 99:
                    await raw.writer.drain()
        ctx.note(f"{n:,} status asks for a {pad // 1000} KB task in {took(started)}, unread "
                 f"for {ctx.sizes.hold:g} s")
        await asyncio.sleep(ctx.sizes.hold)
        raw.resume()
        read, until = 0, time.perf_counter() + 1.0
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(1.0):
                while time.perf_counter() < until and await raw.recv() is not None:
                    read += 1
        if raw.eof or raw.close_code is not None:
            ctx.note(f"then {kind(None, raw.close_code)} after {read} replies")
        else:
            ctx.note(f"then {read} replies read in 1 s, still open")
    finally:
        raw.abort()


UPGRADE = ("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
           "Sec-WebSocket-Version: 13\r\n\r\n")


async def conn_flood(ctx: Ctx) -> None:
    """Open many websockets and send nothing: no hello, no register. They are opened 50 at a
    time (the listen backlog is ~100) and each gets ``hold`` seconds for its 101."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    n = max(0, min(ctx.sizes.connections, soft - 300))  # the rest: the probe, the store
    port = int(ctx.url.rsplit(":", 1)[1].split("/")[0])
    request = UPGRADE.format(port=port).encode()
    held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    statuses: Counter[str] = Counter()

    async def one() -> None:
        try:
            async with asyncio.timeout(ctx.sizes.hold):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                held.append((reader, writer))
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
            statuses[head.split(b" ", 2)[1].decode()] += 1
        except TimeoutError:
            statuses["no response"] += 1
        except (asyncio.IncompleteReadError, OSError):
            statuses["closed"] += 1

    started = time.perf_counter()
    ctx.doing = "opening"
    try:
        for at in range(0, n, 50):
            await asyncio.gather(*(one() for _ in range(min(50, n - at))))
        opened = ", ".join(f"{k} x{v:,}" for k, v in statuses.most_common())
        ctx.note(f"{n:,} idle connections ({opened}) in {took(started)}")
        ctx.doing = "holding"
        await asyncio.sleep(ctx.sizes.hold)
        closed = sum(1 for reader, _ in held if reader.at_eof())
        ctx.note(f"{closed:,} closed by the coordinator {ctx.sizes.hold:g} s later")
    finally:
        for _, writer in held:
            writer.transport.abort()


async def submit_burst(ctx: Ctx) -> None:
    """One caller sends a burst of submits for the probe's capability in one write."""
    n = ctx.sizes.submits
    raw = await RawSocket.open(ctx.url)
    try:
        raw.send({"type": "hello", "caller": "burst"})
        if kind(await raw.recv()) != "welcome":
            ctx.note(f"hello: {kind(None, raw.close_code)}")
            return
        salt = os.urandom(4).hex()
        burst = b"".join(client_frame(json.dumps(
            {"v": 1, "type": "submit", "id": i, "capability": "probe.echo", "params": {"n": i},
             "idempotency_key": f"{salt}-{i}", "wait": False}).encode()) for i in range(n))
        started = time.perf_counter()
        answers: Counter[str] = Counter()
        raw.writer.write(burst)
        # Its own deadline inside the window, so that a slow row still says how far it got.
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(ctx.sizes.window * 0.8):
                while sum(answers.values()) < n and (frame := await raw.recv()) is not None:
                    if kind(frame) not in answers:
                        ctx.explain(frame)
                    answers[kind(frame)] += 1
        seen = ", ".join(f"{k} {v:,}" for k, v in answers.most_common(3)) or "no answer"
        silent = n - sum(answers.values())
        rest = f", {silent:,} unanswered" if silent > 0 else ""
        closed = f", then {kind(None, raw.close_code)}" if raw.eof or raw.close_code else ""
        ctx.note(f"{n:,} submits in one write: {seen} in {took(started)}{rest}{closed}")
    finally:
        raw.abort()


async def deep_nesting(ctx: Ctx) -> None:
    depth = ctx.sizes.nesting
    text = ('{"v": 1, "type": "submit", "id": 1, "capability": "probe.echo", "params": {"n": '
            + "[" * depth + "]" * depth + "}}")
    async with RawCaller(ctx.url) as caller:
        _, outcome = await caller.ask(text)
        ctx.note(f"{depth:,} nested lists ({len(text) // 1024} KB): {outcome}")


async def hostile_names(ctx: Ctx) -> None:
    name = "ev\x00il\x1b[2J\u202egnp.exe"
    async with RawAgent(ctx.url, name, [cap("na\x00me\x1b[31m.\u202eecho")]) as raw:
        ctx.note(raw.outcome)
        ctx.explain(raw.welcome)
        if raw.welcomed:
            caps = (raw.welcome or {}).get("capabilities", [])
            raw_kept = any(any(ord(c) < 32 or 0x202A <= ord(c) <= 0x202E for c in str(c_))
                           for c_ in caps)
            ctx.note(f"capability registered as {caps!r}"[:70]
                     + (" (control chars kept)" if raw_kept else ""))


async def heartbeat_values(ctx: Ctx) -> None:
    async with RawAgent(ctx.url, "beat-agent", [cap("beat.x")]) as raw:
        if not raw.welcomed:
            ctx.note(f"register: {raw.outcome}")
            return
        started = time.perf_counter()
        await raw.send({"type": "heartbeat", "inflight": -5, "queue_depth": -1, "load": 1e308})
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ctx.sizes.tail):
                await raw.heard.wait()
        errors = [kind(f) for f in raw.frames if f.get("type") == "error"]
        closed = raw.ws.close_code
        ctx.note("inflight -5, load 1e308: " + (
            f"{', '.join(errors)} in {took(started)}" if errors else
            f"closed {closed}" if closed else f"no error in {took(started)}: taken as is"))


def _host_port(http: str) -> tuple[str, int]:
    host, port = http.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


async def _http_status(ctx: Ctx, request: bytes, timeout: float) -> str:
    """Send ``request`` on a new REST connection; its status line's code, or what happened."""
    started = time.perf_counter()
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(*_host_port(ctx.http))
            writer.write(request)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            head = await reader.readuntil(b"\r\n")
        return f"{head.split(b' ', 2)[1].decode()} in {took(started)}"
    except TimeoutError:
        return f"no answer in {took(started)}"
    except (asyncio.IncompleteReadError, OSError) as exc:
        return f"{type(exc).__name__} in {took(started)}"
    finally:
        if writer is not None:
            writer.transport.abort()


_BOMBS: dict[int, bytes] = {}


def gzip_bomb(size: int) -> bytes:
    """A submit for the probe's capability whose JSON body is ~1,000x ``size`` once inflated:
    gzip at level 9 of a padding string, cut off once the compressed stream reaches ``size``."""
    if size not in _BOMBS:
        import zlib

        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        out = [z.compress(b'{"capability": "probe.echo", "params": {"n": 1, "pad": "')]
        chunk, total = b"0" * (1 << 20), 0
        while total < size:
            out.append(z.compress(chunk))
            total += len(out[-1])
        out += [z.compress(b'"}}'), z.flush()]
        _BOMBS[size] = b"".join(out)
    return _BOMBS[size]


async def gzip_body(ctx: Ctx) -> None:
    """Compressed REST bodies, no token: does the coordinator inflate them after answering?"""
    if ctx.http == "-":
        ctx.note("no REST door")
        return
    body = gzip_bomb(ctx.sizes.bomb_bytes)
    head = (f"POST /v1/tasks HTTP/1.1\r\nHost: {ctx.http[7:]}\r\nContent-Type: "
            f"application/json\r\nContent-Encoding: gzip\r\nContent-Length: {len(body)}"
            "\r\n\r\n").encode()
    ctx.doing = "uploading"
    answers = await asyncio.gather(*(_http_status(ctx, head + body, ctx.sizes.window)
                                     for _ in range(ctx.sizes.bombs)))
    ctx.note(f"{ctx.sizes.bombs} gzip bodies of {len(body) // 1024} KB: {', '.join(answers)}")
    await asyncio.sleep(ctx.sizes.hold)  # is it still inflating? the probe's stall says


async def rest_loris(ctx: Ctx) -> None:
    """REST sockets that never finish: a third send nothing, a third half a header, a third
    a body's first byte of 1,000. Then: does a new HTTP caller get in, and are they closed?"""
    if ctx.http == "-":
        ctx.note("no REST door")
        return
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    n = max(0, min(ctx.sizes.loris, soft - 300))
    host = ctx.http[7:]
    starts = (b"", f"POST /v1/tasks HTTP/1.1\r\nHost: {host}\r\n".encode(),
              f"POST /v1/tasks HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json"
              "\r\nContent-Length: 1000\r\n\r\n{".encode())
    held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    refused = 0

    async def one(i: int) -> None:
        nonlocal refused
        try:
            reader, writer = await asyncio.open_connection(*_host_port(ctx.http))
        except OSError:
            refused += 1
            return
        held.append((reader, writer))
        writer.write(starts[i % 3])

    started = time.perf_counter()
    ctx.doing = "opening"
    try:
        for at in range(0, n, 50):
            await asyncio.gather(*(one(at + i) for i in range(min(50, n - at))))
        ctx.note(f"{len(held):,} stalled requests opened in {took(started)}"
                 + (f" ({refused:,} refused)" if refused else ""))
        ctx.doing = "holding"
        await asyncio.sleep(ctx.sizes.hold)
        fresh = await _http_status(ctx, f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n"
                                   .encode(), 2.0)

        async def ended(reader: asyncio.StreamReader) -> bool:  # closed, or answered (408)
            with contextlib.suppress(TimeoutError, OSError):
                return bool(await asyncio.wait_for(reader.read(64), 0.05)) or reader.at_eof()
            return reader.at_eof()

        closed = sum(await asyncio.gather(*(ended(reader) for reader, _ in held)))
        ctx.note(f"a new caller's GET /healthz: {fresh}; {closed:,} answered or closed by the "
                 f"coordinator {ctx.sizes.hold:g} s later")
    finally:
        for _, writer in held:
            writer.transport.abort()


async def rest_hog(ctx: Ctx) -> None:
    """One REST caller holds long polls up to the door's request cap (``max_connections``,
    set to ``polls`` for this row) on a task that never ends; what does another caller get?"""
    if ctx.http == "-":
        ctx.note("no REST door")
        return
    host = ctx.http[7:]
    async with RawAgent(ctx.url, "sink", [cap("sink.hold", latency_ms=60_000)]) as sink:
        if not sink.welcomed:
            ctx.note(f"sink: {sink.outcome}")
            return
        sink.mute()  # it takes the invoke and never answers
        body = b'{"capability": "sink.hold", "params": {}, "timeout": 30}'
        submit = (f"POST /v1/tasks HTTP/1.1\r\nHost: {host}\r\nX-Reach-Caller: hog\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                  ).encode() + body
        reader, writer = await asyncio.open_connection(*_host_port(ctx.http))
        try:
            writer.write(submit)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n")
                              if ln.lower().startswith(b"content-length")))
            task_id = json.loads(await reader.readexactly(length))["task_id"]
        finally:
            writer.transport.abort()
        poll = (f"GET /v1/tasks/{task_id}?wait=30 HTTP/1.1\r\nHost: {host}\r\n"
                "X-Reach-Caller: hog\r\n\r\n").encode()
        ctx.doing = "polling"
        polls = [asyncio.ensure_future(_http_status(ctx, poll, ctx.sizes.hold + 1))
                 for _ in range(ctx.sizes.polls)]
        try:
            await asyncio.sleep(min(0.5, ctx.sizes.hold))
            others = Counter()
            for _ in range(5):
                answer = await _http_status(ctx, (f"GET /v1/capabilities HTTP/1.1\r\nHost: "
                                                  f"{host}\r\nX-Reach-Caller: victim\r\n\r\n"
                                                  ).encode(), 2.0)
                others[answer.split(" in ")[0]] += 1
            early = Counter(p.result().split(" in ")[0] for p in polls if p.done())
            ctx.note(f"'hog' holds {ctx.sizes.polls} long polls"
                     + (f" ({', '.join(f'{k} x{v}' for k, v in early.items())} at once)"
                        if early else "")
                     + f"; 'victim' x5: {', '.join(f'{k} x{v}' for k, v in others.items())}")
        finally:
            for p in polls:
                p.cancel()
            await asyncio.gather(*polls, return_exceptions=True)


async def letter_bytes(ctx: Ctx) -> None:
    """Tasks with large params fail at their one (non-idempotent) attempt: each becomes a
    dead letter, kept whole. What do they cost in memory?"""
    spec = cap("letter.fail", latency_ms=100)
    n, pad = ctx.sizes.letters, "x" * ctx.sizes.letter_bytes
    async with RawAgent(ctx.url, "failer", [spec]) as failer:
        if not failer.welcomed:
            ctx.note(f"failer: {failer.outcome}")
            return
        failer.mute()

        async def fail_all() -> None:
            while (frame := await next_frame(failer.ws)) is not None:
                if frame.get("type") == "invoke":
                    await failer.send({"type": "error", "task_id": frame["task_id"],
                                       "attempt": frame.get("attempt", 0),
                                       "error": {"code": "task_failed", "message": "boom"}})

        failing = asyncio.ensure_future(fail_all())
        raw = await RawSocket.open(ctx.url)
        try:
            raw.send({"type": "hello", "caller": "letters"})
            if kind(await raw.recv()) != "welcome":
                ctx.note(f"hello: {kind(None, raw.close_code)}")
                return
            started = time.perf_counter()
            ctx.doing = "submitting"
            answers: Counter[str] = Counter()
            for i in range(n):
                raw.send({"type": "submit", "id": i, "capability": "letter.fail",
                          "params": {"i": i, "pad": pad}, "timeout": 5})
                await raw.writer.drain()
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(ctx.sizes.window * 0.8):
                    while sum(answers.values()) < n and (frame := await raw.recv()) is not None:
                        if frame.get("type") != "accepted":
                            answers[kind(frame)] += 1
            seen = ", ".join(f"{k} {v:,}" for k, v in answers.most_common(3)) or "no answer"
            ctx.note(f"{n:,} tasks of {ctx.sizes.letter_bytes // 1000} KB params, each failing: "
                     f"{seen} in {took(started)}")
        finally:
            raw.abort()
            failing.cancel()
            await asyncio.gather(failing, return_exceptions=True)


async def huge_number(ctx: Ctx) -> None:
    async with RawCaller(ctx.url) as caller:
        got, outcome = await caller.ask('{"v": 1, "type": "submit", "id": 1, "capability": '
                                        '"probe.echo", "params": {"n": 1e400}, "timeout": 2}')
        last = got[-1] if got else None
        seen = (f"the agent got n={last.get('result')!r}" if last and last.get("type") == "result"
                else outcome)
        ctx.note(f"params {{\"n\": 1e400}}: {seen}")
        ctx.explain(last)


@dataclass(frozen=True)
class Attack:
    name: str
    run: Callable[[Ctx], Awaitable[None]]
    what: str
    secured: bool = False  # tokens for every principal, serve rules where there are any
    options: Callable[[Sizes], dict[str, Any]] | None = None  # more Reach.start options


ATTACKS = [
    Attack("quiet", quiet, "no attack: the baseline for stall and RSS"),
    Attack("remote-ref", remote_ref, 'params {"$ref": "http://127.0.0.1:<mute listener>/s.json"}'),
    Attack("file-ref", file_ref, 'params {"$ref": "file:///etc/hostname"}'),
    Attack("redos", redos, "pattern ^(a+)+$, then a submit of 'a'*31 + '!'"),
    Attack("bad-regex", bad_regex, 'pattern "((" then a submit'),
    Attack("reg-flood-one", reg_flood_one, "one register with 10,000 capabilities (quick 1,000)"),
    Attack("reg-flood-many", reg_flood_many, "10 registers x 1,000 capabilities (quick 4 x 250)"),
    Attack("capture", capture, "'evil' registers probe.echo with weight 1000 (tokens)",
           secured=True),
    Attack("cross-caller", cross_caller, "'mallory' reuses the probe's key, asks for its task "
           "(tokens)", secured=True),
    Attack("slow-reader", slow_reader, "2,000 status asks for a 450 KB task, never read "
           "(quick 200)"),
    Attack("conn-flood", conn_flood, "2,000 websockets that never say hello (quick 300)"),
    Attack("submit-burst", submit_burst, "50,000 submits in one write (quick 5,000)"),
    Attack("deep-nesting", deep_nesting, "a submit whose params nest 100,000 lists"),
    Attack("hostile-names", hostile_names, "NUL, ESC and bidi characters in agent and "
           "capability names"),
    Attack("heartbeat-values", heartbeat_values, 'heartbeat {"inflight": -5, "load": 1e308}'),
    # the issue "Fix first" (an attack trial against the REST door and the stores)
    Attack("gzip-body", gzip_body, "2 REST submits of 1 MB gzip that inflate ~1,000x, no "
           "token (quick 128 KB)"),
    Attack("rest-loris", rest_loris, "500 REST requests never finished: nothing, half a "
           "header, 1 byte of a body (quick 100); first-head and body timeouts at half the "
           "hold", options=lambda sizes: {"hello_timeout": sizes.hold / 2,
                                          "http_body_timeout": sizes.hold / 2}),
    Attack("rest-hog", rest_hog, "one caller holds 200 long polls, the door's whole request "
           "cap (quick 50)", options=lambda sizes: {"max_connections": sizes.polls}),
    Attack("letter-bytes", letter_bytes, "300 dead letters of 900 KB params (quick 40 x 400 KB)"),
    Attack("huge-number", huge_number, 'a submit with params {"n": 1e400}'),
]


# =====================================================================================
# the parent: one row per attack
# =====================================================================================


@dataclass
class Row:
    name: str
    outcome: str
    probe: dict[str, Any] = field(default_factory=dict)
    coordinator: str = ""
    seconds: float = 0.0
    details: list[str] = field(default_factory=list)


def _options(attack: Attack, sizes: Sizes) -> dict[str, Any]:
    options: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "store": "sqlite://"}
    optional: list[str] = []
    if attack.secured:
        options.update(tokens=TOKENS, serves=SERVES)
        optional.append("serves")
    if attack.options is not None:
        options.update(attack.options(sizes))
    return {"options": options, "optional": optional}


async def run_row(attack: Attack, zygote: Child, probe: Child, sizes: Sizes) -> Row:
    """A fresh coordinator, the probe attached, the attack within ``sizes.window``, the tail,
    then the coordinator killed."""
    pid, url, http, extra = (await zygote.request(f"spawn {json.dumps(_options(attack, sizes))}",
                                                  "SPAWNED", 30)).split(" ", 3)
    row = Row(attack.name, "")
    ctx = Ctx(url, sizes, probe, http=http)
    try:
        if url == "-":  # the coordinator refused the options: this version has no such thing
            row.outcome = extra
            return row
        tokens = [TOKEN_OF[p] if attack.secured else "-" for p in ("probe-agent", "probe-caller")]
        try:
            await probe.request(f"attach {url} {pid} {' '.join(tokens)}", "ATTACHED", 15)
        except ChildFailed as exc:
            row.outcome = f"n/a: the probe could not connect: {str(exc)[:80]}"
            return row
        if extra != "-":
            ctx.note(f"no {extra} on this version")
        await probe.request("start", "STARTED", 5)
        try:
            async with asyncio.timeout(sizes.window):
                await attack.run(ctx)
        except TimeoutError:
            ctx.note(f"{ctx.doing + ': ' if ctx.doing else ''}no answer within "
                     f"{sizes.window:g} s")
        except Exception as exc:  # an attack's own failure is a finding too; say what it was
            ctx.note(f"{type(exc).__name__}: {exc}"[:90])
        await asyncio.sleep(sizes.tail)
        row.probe = json.loads(await probe.request("stop", "RESULT", sizes.probe_timeout + 10))
    finally:
        row.coordinator = (await zygote.request(f"stop {pid}", "STOPPED", 15)).split()[-1]
        with contextlib.suppress(ChildFailed):
            await probe.request("detach", "DETACHED", 10)
    if row.coordinator.startswith("crashed"):
        ctx.note(f"coordinator {row.coordinator}")
    elif row.probe and not row.probe["last_ok"]:
        ctx.note("probe still failing at the end")
    row.outcome = "; ".join(ctx.notes + ctx.last)
    row.details = ctx.details
    return row


COLUMNS = (("attack", "<16"), ("worst ms", ">8"), ("stall ms", ">8"), ("p50 ms", ">7"),
           ("calls", ">6"), ("fails", ">5"), ("peak RSS MB", ">11"), ("RSS +MB", ">7"),
           ("outcome", "<"))


def _line(values: list[str]) -> str:
    return "  ".join(f"{v:{fmt}}" for v, (_, fmt) in zip(values, COLUMNS, strict=True)).rstrip()


def format_row(row: Row, base: Row | None) -> str:
    pr = row.probe
    if not pr:
        return _line([row.name, "-", "-", "-", "-", "-", "-", "-", row.outcome])
    def ms(seconds: float | None) -> str:
        return "-" if seconds is None else f"{seconds * 1000:.1f}"

    base_p50 = base.probe.get("p50") if base and base.probe else None
    stall = (pr["worst"] - base_p50) if pr["worst"] is not None and base_p50 is not None else None
    rss, base_rss = pr.get("rss_peak"), base.probe.get("rss_peak") if base and base.probe else None
    growth = "-" if rss is None or base_rss is None else f"{round((rss - base_rss) / MB):+d}"
    return _line([row.name, ms(pr["worst"]), ms(stall), ms(pr["p50"]), str(pr["calls"]),
                  str(pr["fails"]), "-" if rss is None else f"{rss / MB:.0f}", growth,
                  row.outcome])


def header_lines() -> list[str]:
    return [_line([name for name, _ in COLUMNS]),
            _line(["-" * len(name) for name, _ in COLUMNS])]


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("agent-reach", "websockets", "psutil"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "-"
    return out


def select(only: list[str] | None) -> list[Attack]:
    if not only:
        return list(ATTACKS)
    names = {a.name for a in ATTACKS}
    unknown = sorted(set(only) - names)
    if unknown:
        raise SystemExit(f"--only: no attack named {unknown}; attacks: {' '.join(names)}")
    return [a for a in ATTACKS if a.name == "quiet" or a.name in only]


async def parent(args: argparse.Namespace) -> int:
    base = QUICK if args.quick else FULL
    sizes = Sizes(**{**base.__dict__, **({"window": args.window} if args.window else {}),
                     **({"probe_timeout": args.probe_timeout} if args.probe_timeout else {})})
    attacks = select(args.only)
    if args.list:
        for attack in attacks:
            print(f"{attack.name:<18} {attack.what}")
        return 0
    print(report.header("Agent-Reach hostile-peer benchmark", _versions()))
    print(f"a fresh coordinator per row (in-memory store); each attack capped at "
          f"{sizes.window:g} s, then {sizes.tail:g} s more of probing; probe calls capped at "
          f"{sizes.probe_timeout:g} s; RSS sampled every {SAMPLE_EVERY * 1000:.0f} ms",
          flush=True)
    started = time.perf_counter()
    if any(a.run is gzip_body for a in attacks):  # made once, before any row's window opens
        await asyncio.to_thread(gzip_bomb, sizes.bomb_bytes)
    with tempfile.TemporaryDirectory(prefix="reach-hostile-") as tmp:
        log_dir = os.path.abspath(args.log_dir) if args.log_dir else tmp
        os.makedirs(log_dir, exist_ok=True)
        launcher = Launcher(log_dir, tmp)
        try:
            (zygote, _), (probe, _) = await asyncio.gather(
                launcher.start("zygote", [str(HERE), "--role", "zygote"]),
                launcher.start("probe", [str(HERE), "--role", "probe", "--probe-timeout",
                                         str(sizes.probe_timeout)]))
            print()
            print("\n".join(header_lines()), flush=True)
            rows: list[Row] = []
            for attack in attacks:
                t0 = time.perf_counter()
                row = await run_row(attack, zygote, probe, sizes)
                row.seconds = time.perf_counter() - t0
                rows.append(row)
                print(format_row(row, rows[0]), flush=True)
        finally:
            await launcher.stop()
    print()
    print("worst: the slowest probe call in the attack and the tail after it; stall: worst minus "
          "the quiet row's p50; fails: probe calls that erred or hit the cap; +MB: peak RSS "
          "against the quiet row's")
    print("seconds per row: " + ", ".join(f"{r.name} {r.seconds:.1f}" for r in rows))
    for row in rows:
        for detail in row.details:
            print(f"note: {row.name}: {detail}")
        if row.probe.get("first_failure"):
            print(f"note: {row.name}: first probe failure: {row.probe['first_failure']}")
    print(f"\ntotal {time.perf_counter() - started:.1f}s", flush=True)
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and 1 s windows: every row in about 10 s")
    ap.add_argument("--only", nargs="+", metavar="ATTACK", default=None,
                    help="run only these attacks (the quiet baseline always runs first)")
    ap.add_argument("--list", action="store_true", help="print the attacks and exit")
    ap.add_argument("--window", type=float, default=None,
                    help="cap on one attack in seconds (default 5; --quick 1)")
    ap.add_argument("--probe-timeout", type=float, default=None,
                    help="cap on one probe call in seconds (default 2; --quick 0.5)")
    ap.add_argument("--log-dir", default=None,
                    help="keep the children's stderr here (default: a temp dir, removed)")
    ap.add_argument("--role", choices=("zygote", "probe"), default=None, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.role == "zygote":
        role_zygote(args)
        return 0
    if args.role == "probe":
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(role_probe(args))
        return 0
    try:
        return asyncio.run(parent(args))
    except KeyboardInterrupt:
        print("\ninterrupted; all benchmark processes stopped", file=sys.stderr)
        return 130
    except ChildFailed as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
