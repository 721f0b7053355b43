"""Attacks on the peer links between coordinators (issue 25, items 2-4; docs/security.md,
"Peer links").

- A stolen peer secret is not the whole system: a forward's caller must pass the holder's call
  rules and is audited; its idempotency key must be its caller's (neither the holder nor the
  agent SDK's key cache answers one caller with another's result); a forward may touch only
  attempts its own link started (another link's, or the holder's own delivery, is refused and
  left alone).
- A node trusts no one at a ``--peer`` URL that cannot prove it knows the secret: the secret
  never crosses the wire, an impostor gets no forward and none of its agents is mirrored; a
  real peer's agents pass this node's serve rules.
- The secret can come from a file or the environment, not only the command line.

The attacker is a raw websocket client or server on loopback, speaking the wire frames of
docs/protocol.md §14. ``steal_link`` speaks whichever peer handshake the node speaks (the
challenge-response, or the old one that took the token itself), so every attack runs against
the code before the fix too, and there it succeeds.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import websockets
from subprocs import Proc, free_port, start_coordinator
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.server import ServerConnection

from reach import Agent, Client, Context, Reach, ReachError
from reach.cli import main

TOKEN = "cluster-secret-7f3a"
BASE: dict[str, Any] = dict(heartbeat_interval=0.05, suspect_after=4, offline_after=6,
                            peer_token=TOKEN, http_port=None, warmup=0.0, ack_timeout=1.0,
                            peer_flush=0.005)
TOKENS = {"t-svc": "*", "t-alice": "alice"}
# Call rules of the holder: alice and mallory may use the vault and the ledger; intern
# (falling to "*") may use nothing.
RULES = {"alice": ["secret.*", "ledger.*"], "mallory": ["secret.*", "ledger.*"], "*": []}


def mac(secret: str, role: str, dialer: str, holder: str, dialer_nonce: str,
        holder_nonce: str) -> str:
    """docs/protocol.md §14's proof, from the page."""
    text = "\n".join(("reach-peer-v1", role, dialer, holder, dialer_nonce, holder_nonce))
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


class Raw:
    """One raw peer link: JSON frames out; frames in, kept until a test asks for them."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.held: list[dict[str, Any]] = []

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send(json.dumps({"v": 1, **frame}))

    async def expect(self, match: Callable[[dict[str, Any]], bool],
                     timeout: float = 5.0) -> dict[str, Any]:
        for i, kept in enumerate(self.held):
            if match(kept):
                return self.held.pop(i)
        async with asyncio.timeout(timeout):
            while True:
                frame: dict[str, Any] = json.loads(await self.ws.recv())
                if match(frame):
                    return frame
                self.held.append(frame)

    async def agent_id(self, name: str) -> str:
        """The id of the holder's agent ``name``, from its ``agents`` rows."""
        frame = await self.expect(lambda f: f["type"] == "agents" and any(
            r["name"] == name for r in f["rows"]))
        return str(next(r["agent_id"] for r in frame["rows"] if r["name"] == name))

    async def answer(self, task_id: str, timeout: float = 5.0) -> dict[str, Any]:
        return await self.expect(lambda f: f.get("task_id") == task_id and f["type"] in (
            "result", "error"), timeout)


async def steal_link(url: str, node: str = "EVIL", secret: str = TOKEN) -> Raw:
    """A peer link made by whoever holds the stolen secret (not a node of the cluster)."""
    nonce = "e" * 32
    ws = await websockets.connect(url, compression=None, max_size=None)
    await ws.send(json.dumps({"v": 1, "type": "hello", "role": "peer", "node": node,
                              "caller": node, "nonce": nonce}))
    first = json.loads(await ws.recv())
    if first["type"] == "challenge":
        await ws.send(json.dumps({"v": 1, "type": "proof", "proof": mac(
            secret, "dialer", node, first["node"], nonce, first["nonce"])}))
    else:  # a node of the old handshake refuses a hello without the token: give it
        await ws.close()
        ws = await websockets.connect(url, compression=None, max_size=None)
        await ws.send(json.dumps({"v": 1, "type": "hello", "role": "peer", "node": node,
                                  "caller": node, "token": secret}))
    link = Raw(ws)
    await link.expect(lambda f: f["type"] == "welcome")
    return link


def forward(agent_id: str, task_id: str, caller: str, key: str, capability: str,
            attempt: int = 1, **params: Any) -> dict[str, Any]:
    return {"type": "forward", "agent_id": agent_id, "task_id": task_id, "attempt": attempt,
            "capability": capability, "params": params, "idempotency_key": key,
            "trace_id": f"tr-{task_id}", "caller": caller}


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


async def until(check: Callable[[], Any], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.002)


async def holder(stack: AsyncExitStack, **options: Any) -> Reach:
    return await stack.enter_async_context(Reach.start(
        node_id="B", tokens=TOKENS, permissions=RULES, **{**BASE, **options}))


def vault(runs: list[tuple[str, str]]) -> Agent:
    """``secret.read``: each caller's private answer; ``runs`` records (caller, who)."""
    agent = Agent("vault", token="t-svc")

    @agent.capability("secret.read", idempotent=True, latency_ms=50)
    async def read(who: str, ctx: Context) -> dict[str, str]:
        runs.append((ctx.caller, who))
        return {"secret": f"{who}'s private result #{len(runs)}"}

    return agent


# ---------------------------------------------------------------- item 2: a stolen secret

async def test_a_forward_is_held_to_the_holders_call_rules_and_audited(
        stack: AsyncExitStack, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with AsyncExitStack() as inner:  # (closed first: the audit file is then complete)
        b = await holder(inner, audit_log=str(audit))
        runs: list[tuple[str, str]] = []
        await inner.enter_async_context(vault(runs).connect(b.url))
        evil = await steal_link(b.url)
        inner.push_async_callback(evil.ws.close)
        agent_id = await evil.agent_id("vault")
        # intern may call nothing at B: a forward naming it as the caller is refused there.
        await evil.send(forward(agent_id, "t-intern", "intern", "intern/k", "secret.read",
                                who="alice"))
        refused = await evil.answer("t-intern")
        assert refused["type"] == "error", refused
        assert refused["error"]["code"] == "unauthorized"
        assert refused["error"]["details"]["answer"] is True  # final: no fail-over
        assert runs == []
        # A caller the rules allow is served as before.
        await evil.send(forward(agent_id, "t-alice", "alice", "alice/k", "secret.read",
                                who="alice"))
        assert (await evil.answer("t-alice"))["type"] == "result"
        assert runs == [("alice", "alice")]
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(r["node"], r["caller"], r["capability"], r["task_id"], r["attempt"],
             r["agent"], r["decision"]) for r in lines if r["event"] == "forward"] == [
        ("EVIL", "intern", "secret.read", "t-intern", 1, "vault", "unauthorized"),
        ("EVIL", "alice", "secret.read", "t-alice", 1, "vault", "accepted")]


async def test_a_forward_cannot_read_another_callers_result_by_its_key(
        stack: AsyncExitStack) -> None:
    b = await holder(stack)
    runs: list[tuple[str, str]] = []
    await stack.enter_async_context(vault(runs).connect(b.url))
    alice = await stack.enter_async_context(Client.connect(b.url, caller="alice",
                                                           token="t-alice"))
    mine = await alice.call("secret.read", {"who": "alice"}, idempotency_key="k1", timeout=5)
    assert mine == {"secret": "alice's private result #1"}
    evil = await steal_link(b.url)
    stack.push_async_callback(evil.ws.close)
    agent_id = await evil.agent_id("vault")
    # mallory may call the vault, but alice's key (as the coordinator scopes it) is not hers.
    await evil.send(forward(agent_id, "t-steal", "mallory", "alice/k1", "secret.read",
                            who="mallory"))
    answer = await evil.answer("t-steal")
    assert "alice's private" not in json.dumps(answer)
    assert answer["type"] == "error" and answer["error"]["code"] == "unauthorized"
    assert runs == [("alice", "alice")]


async def test_the_agent_key_cache_answers_only_the_caller_whose_key_it_is() -> None:
    """Below the holder: an agent given another caller's key (by any coordinator) runs the
    work again for the new caller instead of answering with the cached result."""
    got: dict[str, dict[str, Any]] = {}
    done = asyncio.Event()

    async def coordinator(ws: ServerConnection) -> None:
        await ws.recv()  # register
        await ws.send(json.dumps({"v": 1, "type": "welcome", "role": "agent",
                                  "agent_id": "ag-1", "heartbeat_interval": 10}))
        for task, caller in (("t1", "alice"), ("t2", "mallory")):
            await ws.send(json.dumps({
                "v": 1, "type": "invoke", "task_id": task, "attempt": 1,
                "capability": "secret.read", "params": {"who": caller},
                "idempotency_key": "alice/k1", "trace_id": task, "caller": caller}))
            while task not in got:
                frame = json.loads(await ws.recv())
                if frame["type"] in ("result", "error"):
                    got[frame["task_id"]] = frame
        done.set()
        await ws.wait_closed()

    runs: list[tuple[str, str]] = []
    agent = vault(runs)
    async with websockets.serve(coordinator, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with agent.connect(url):
            await asyncio.wait_for(done.wait(), 5)
    assert got["t1"]["result"] == {"secret": "alice's private result #1"}
    assert got["t2"]["result"] == {"secret": "mallory's private result #2"}
    assert runs == [("alice", "alice"), ("mallory", "mallory")]


def ledger(runs: list[tuple[str, int]], release: asyncio.Event) -> Agent:
    """``ledger.write``: not idempotent, holds until ``release``; runs are (task, attempt)."""
    agent = Agent("ledger", token="t-svc")

    @agent.capability("ledger.write", idempotent=False, latency_ms=2000)
    async def write(amount: int, ctx: Context) -> dict[str, int]:
        runs.append((ctx.task_id, ctx.attempt))
        await release.wait()
        return {"written": amount}

    return agent


async def refusal_or_none(link: Raw, task_id: str) -> dict[str, Any] | None:
    """The holder's refusal of a forward, which comes at once; None if nothing came (the
    forward was taken: its agent is now held up running it)."""
    try:
        return await link.answer(task_id, timeout=1.0)
    except TimeoutError:
        return None


async def test_a_forward_cannot_take_over_the_holders_own_delivery(
        stack: AsyncExitStack) -> None:
    b = await holder(stack)
    runs: list[tuple[str, int]] = []
    release = asyncio.Event()
    await stack.enter_async_context(ledger(runs, release).connect(b.url))
    alice = await stack.enter_async_context(Client.connect(b.url, caller="alice",
                                                           token="t-alice"))
    handle = await alice.submit("ledger.write", {"amount": 100}, timeout=3)
    await until(lambda: runs)
    [(task_id, attempt)] = runs
    assert task_id == handle.task_id
    evil = await steal_link(b.url)
    stack.push_async_callback(evil.ws.close)
    agent_id = await evil.agent_id("ledger")
    # The same (task id, attempt), a key of the forwarded caller's own: it must not replace
    # alice's pending delivery (her answer would go to the thief) nor run the write again.
    await evil.send(forward(agent_id, task_id, "alice", "alice/other", "ledger.write",
                            attempt, amount=999))
    answer = await refusal_or_none(evil, task_id)
    release.set()
    assert runs == [(task_id, attempt)]  # the write ran once
    assert answer is not None and answer["type"] == "error", answer
    assert answer["error"]["details"]["taken"] is True  # refused: not this link's attempt
    assert await handle.result(timeout=5) == {"written": 100}  # her answer is still hers


async def test_a_forward_cannot_take_over_another_links_attempt(
        stack: AsyncExitStack) -> None:
    b = await holder(stack)
    a = await stack.enter_async_context(Reach.start(node_id="A", **BASE))
    runs: list[tuple[str, int]] = []
    release = asyncio.Event()
    await stack.enter_async_context(ledger(runs, release).connect(b.url))
    await a.peers.add("B", b.url)
    await a.peers.synced("B")
    alice = await stack.enter_async_context(Client.connect(a.url, caller="alice"))
    handle = await alice.submit("ledger.write", {"amount": 5}, timeout=3)
    await until(lambda: runs)
    [(task_id, attempt)] = runs  # forwarded by A over its link to B
    assert task_id == handle.task_id
    evil = await steal_link(b.url)
    stack.push_async_callback(evil.ws.close)
    agent_id = await evil.agent_id("ledger")
    await evil.send(forward(agent_id, task_id, "alice", "alice/other", "ledger.write",
                            attempt, amount=999))
    answer = await refusal_or_none(evil, task_id)
    release.set()
    assert runs == [(task_id, attempt)]
    assert answer is not None and answer["type"] == "error", answer
    assert answer["error"]["details"]["taken"] is True  # refused: not this link's attempt
    assert await handle.result(timeout=5) == {"written": 5}


# ---------------------------------------------------------------- item 3: who answers a URL

@pytest.mark.parametrize("answer", ["welcome", "challenge"])
async def test_a_listener_without_the_secret_gets_no_token_no_calls_no_mirror(
        stack: AsyncExitStack, answer: str) -> None:
    """An impostor at a ``--peer`` URL: it answers as a peer (a plain welcome, or a challenge
    with a proof it cannot make), offers a fast ``text.echo`` and forges every result."""
    a = await stack.enter_async_context(Reach.start(node_id="A", **BASE))
    echo = Agent("echo-a")

    @echo.capability("text.echo", idempotent=True, latency_ms=200)
    async def local_echo(text: str) -> dict[str, str]:
        return {"text": text, "by": "echo-a"}

    await stack.enter_async_context(echo.connect(a.url))
    heard: list[dict[str, Any]] = []
    forged = 0

    async def impostor(ws: ServerConnection) -> None:
        nonlocal forged
        async for raw in ws:
            frame = json.loads(raw)
            heard.append(frame)
            if frame["type"] == "hello":
                if answer == "challenge":
                    await ws.send(json.dumps({"v": 1, "type": "challenge", "node": "B",
                                              "nonce": "f" * 32, "proof": "0" * 64}))
                    continue
                await ws.send(json.dumps({"v": 1, "type": "welcome", "role": "peer",
                                          "node": "B"}))
            if frame["type"] in ("hello", "proof"):
                await ws.send(json.dumps({"v": 1, "type": "agents", "synced": True, "rows": [{
                    "agent_id": "ag-fake", "name": "fake-echo", "capabilities": [{
                        "name": "text.echo", "idempotent": True, "latency_ms": 1,
                        "weight": 100}]}]}))
            elif frame["type"] == "forward":
                forged += 1
                await ws.send(json.dumps({"v": 1, "type": "result", "task_id": frame["task_id"],
                                          "attempt": frame["attempt"],
                                          "result": {"text": "forged", "by": "impostor"}}))

    async with websockets.serve(impostor, "127.0.0.1", 0) as server:
        await a.peers.add("B", f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        await until(lambda: a.peers.view()[0]["error"] or any(
            v["name"] == "fake-echo" for v in a.agents()))
        client = await stack.enter_async_context(Client.connect(a.url, caller="planner"))
        answers = [await client.call("text.echo", {"text": str(i)}, timeout=5)
                   for i in range(30)]
        assert TOKEN not in json.dumps(heard)  # the secret never went on the wire
        assert all("token" not in f for f in heard)
        assert forged == 0 and all(r["by"] == "echo-a" for r in answers)
        assert {f["type"] for f in heard} == {"hello"}  # no proof, no forward
        assert [v["name"] for v in a.agents()] == ["echo-a"]  # nothing mirrored
        await until(lambda: len([f for f in heard if f["type"] == "hello"]) >= 2)  # redialled
        error = a.peers.view()[0]["error"]
        assert "without proving" in error or "did not prove" in error
        await a.peers.remove("B")


async def test_an_impostor_saying_same_node_does_not_stop_the_dialling(
        stack: AsyncExitStack) -> None:
    a = await stack.enter_async_context(Reach.start(node_id="A", **BASE))
    hellos = 0

    async def liar(ws: ServerConnection) -> None:
        nonlocal hellos
        await ws.recv()
        hellos += 1
        await ws.send(json.dumps({"v": 1, "type": "error", "error": {
            "code": "protocol_error", "message": "you dialled yourself",
            "details": {"same_node": True, "proof": "0" * 64}}}))
        await ws.close()

    async with websockets.serve(liar, "127.0.0.1", 0) as server:
        await a.peers.add(None, f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        await until(lambda: hellos >= 3)  # refused, and dialled again (backoff from 50 ms)
        assert a.peers.view()[0]["error"] == "refused: you dialled yourself"
        await a.peers.remove(a.peers.view()[0]["url"])


async def test_an_old_style_peer_hello_that_sends_the_token_is_refused(
        stack: AsyncExitStack) -> None:
    b = await holder(stack)
    async with websockets.connect(b.url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "hello", "role": "peer", "node": "OLD",
                                  "token": TOKEN}))
        refusal = json.loads(await ws.recv())
        assert refusal["type"] == "error", refusal
        assert refusal["error"]["code"] == "protocol_error"
        assert "upgrade" in refusal["error"]["message"]
        assert refusal["error"]["details"]["handshake"] == "challenge-response"


@pytest.mark.parametrize("proof", [{"type": "proof", "proof": "not hex"},
                                   {"type": "forward", "task_id": "t"}, None])
async def test_a_dialer_without_a_valid_proof_sees_no_agent(
        stack: AsyncExitStack, proof: dict[str, Any] | None) -> None:
    b = await holder(stack, hello_timeout=0.2)
    await stack.enter_async_context(vault([]).connect(b.url))
    async with websockets.connect(b.url) as ws:
        await ws.send(json.dumps({"v": 1, "type": "hello", "role": "peer", "node": "EVIL",
                                  "nonce": "e" * 32}))
        challenge = json.loads(await ws.recv())
        assert challenge["type"] == "challenge"
        if proof is None:  # says nothing: refused at the hello timeout
            async with asyncio.timeout(5):
                refusal = json.loads(await ws.recv())
        else:
            await ws.send(json.dumps({"v": 1, **proof}))
            refusal = json.loads(await ws.recv())
        assert refusal["type"] == "error" and refusal["error"]["code"] == "unauthorized"


async def test_handshakes_waiting_for_a_proof_are_bounded_per_address(
        stack: AsyncExitStack) -> None:
    """A challenge is answered before the dialer is known: unproved handshakes from one
    address are bounded as connections before their hello are (max_pending_per_address)."""
    b = await holder(stack, max_pending_per_address=2)
    hello = json.dumps({"v": 1, "type": "hello", "role": "peer", "node": "EVIL",
                        "nonce": "e" * 32})
    waiting = []
    for _ in range(2):
        ws = await websockets.connect(b.url)
        stack.push_async_callback(ws.close)
        await ws.send(hello)
        assert json.loads(await ws.recv())["type"] == "challenge"
        waiting.append(ws)
    async with websockets.connect(b.url) as third:
        await third.send(hello)
        refusal = json.loads(await third.recv())
        assert refusal["type"] == "error" and refusal["error"]["code"] == "unavailable"
        assert "too many peer handshakes" in refusal["error"]["message"]
    await waiting[0].close()  # one gives up: room for a real peer again (once B sees it)
    async with asyncio.timeout(5):
        while True:
            try:
                link = await steal_link(b.url)
                break
            except (AssertionError, KeyError, websockets.ConnectionClosed):
                await asyncio.sleep(0.01)
    await link.ws.close()


async def test_a_holder_that_proves_then_refuses_is_redialled_and_says_why(
        stack: AsyncExitStack) -> None:
    a = await stack.enter_async_context(Reach.start(node_id="A", **BASE))
    proofs: list[str] = []

    async def picky(ws: ServerConnection) -> None:
        hello = json.loads(await ws.recv())
        await ws.send(json.dumps({"v": 1, "type": "challenge", "node": "B", "nonce": "b" * 32,
                                  "proof": mac(TOKEN, "holder", "A", "B", hello["nonce"],
                                               "b" * 32)}))
        proofs.append(json.loads(await ws.recv())["proof"])
        await ws.send(json.dumps({"v": 1, "type": "error", "error": {
            "code": "unauthorized", "message": "not today"}} if len(proofs) == 1 else
            {"v": 1, "type": "welcome", "role": "caller"}))
        await ws.close()

    async with websockets.serve(picky, "127.0.0.1", 0) as server:
        await a.peers.add("B", f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        await until(lambda: len(proofs) >= 2 and a.peers.view()[0]["error"] !=
                    "refused: not today")
        assert a.peers.view()[0]["error"] == \
            "the peer did not answer its proof with a peer welcome"
        await a.peers.remove("B")


def test_an_empty_secret_from_the_environment_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_PEER_TOKEN", "  ")
    assert main(["serve", "--port", "0", "--no-http", "--store",
                 f"sqlite:///{tmp_path / 'r.db'}", "--peer", "ws://127.0.0.1:9"]) == 2
    assert "REACH_PEER_TOKEN must not be empty" in capsys.readouterr().err


async def test_a_peers_agents_pass_this_nodes_serve_rules(stack: AsyncExitStack) -> None:
    a = await stack.enter_async_context(Reach.start(
        node_id="A", tokens=TOKENS, serves={"echo-a": ["text.*"], "echo-b": ["text.*"]},
        **BASE))
    b = await stack.enter_async_context(Reach.start(node_id="B", **BASE))  # no serve rules

    def echo(name: str, token: str | None = None) -> Agent:
        agent = Agent(name, token=token)

        @agent.capability("text.echo", idempotent=True, latency_ms=1, weight=100)
        async def run(text: str) -> dict[str, str]:
            return {"text": text, "by": name}

        return agent

    await stack.enter_async_context(echo("echo-a", "t-svc").connect(a.url))
    await stack.enter_async_context(echo("echo-b").connect(b.url))  # A's rules allow it
    await stack.enter_async_context(echo("rogue").connect(b.url))  # A's rules name it not
    await a.peers.add("B", b.url)
    await a.peers.synced("B")
    await until(lambda: any(v["name"] == "echo-b" for v in a.agents()))
    assert sorted(v["name"] for v in a.agents()) == ["echo-a", "echo-b"]
    assert a.peers.view()[0]["bad_frames"] >= 1  # the refused row, logged
    client = await stack.enter_async_context(Client.connect(a.url, caller="alice",
                                                            token="t-alice"))
    by = {(await client.call("text.echo", {"text": str(i)}, timeout=5))["by"]
          for i in range(20)}
    assert "rogue" not in by


# ---------------------------------------------------------------- item 4: where the secret lives

def test_help_names_the_file_and_the_environment_variable(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for needed in ("--peer-token-file FILE", "REACH_PEER_TOKEN", "never send it",
                   "sees it in ps"):
        assert needed in out, needed


@pytest.mark.parametrize(("content", "extra", "message"), [
    (None, [], "--peer-token-file"),  # no such file
    ("\n", [], "must not be empty"),
    ("s3cret\n", ["--peer-token", "other"], "give the peer secret once"),
])
def test_a_bad_peer_token_file_is_one_line_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None,
        extra: list[str], message: str) -> None:
    secret = tmp_path / "peer.secret"
    if content is not None:
        secret.write_text(content)
    db = tmp_path / "r.db"
    assert main(["serve", "--port", "0", "--no-http", "--store", f"sqlite:///{db}",
                 "--peer-token-file", str(secret), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("reach: ") and message in err and err.count("\n") == 1
    assert not db.exists()


async def test_the_secret_from_a_file_and_from_the_environment_links_two_nodes(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    secret = "file-and-env-secret-91c2"
    path = tmp_path / "peer.secret"
    path.write_text(secret + "\n")
    pa, pb = free_port(), free_port()
    a = start_coordinator(spawn, "A", pa, tmp_path / "a.db", "--no-http", "--node-id", "A",
                          "--peer-token-file", path, "--peer", f"ws://127.0.0.1:{pb}")
    argv = ["serve", "--port", str(pb), "--store", f"sqlite:///{tmp_path / 'b.db'}",
            "--heartbeat-interval", "0.05", "--log-level", "WARNING", "--no-http",
            "--node-id", "B", "--peer", f"ws://127.0.0.1:{pa}"]
    b = spawn("B", "-c", "import os, sys; os.environ['REACH_PEER_TOKEN'] = sys.argv[1]; "
                         "from reach.cli import main; sys.exit(main(sys.argv[2:]))",
              secret, *argv)
    await a.wait_for("listening on")
    await b.wait_for("listening on")
    # Not on A's command line (ps); B's is a test harness passing it to its environment.
    with open(f"/proc/{a.pid}/cmdline", "rb") as fh:
        assert secret.encode() not in fh.read()
    agent = Agent("far", reconnect_base=0.02)

    @agent.capability("job.run", idempotent=True)
    async def job(n: int) -> dict[str, int]:
        return {"n": n + 1}

    async with agent.connect(f"ws://127.0.0.1:{pb}"), \
            Client.connect(f"ws://127.0.0.1:{pa}", caller="bob") as client:
        async with asyncio.timeout(20):
            while True:  # A mirrors B's agent once linked (both proved the same secret)
                try:
                    assert await client.call("job.run", {"n": 1}, timeout=5) == {"n": 2}
                    break
                except ReachError as exc:
                    if exc.code not in ("no_route", "unavailable"):
                        raise
                    await asyncio.sleep(0.05)
    assert os.environ.get("REACH_PEER_TOKEN") != secret
