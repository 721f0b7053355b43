"""An A2A agent as a Reach agent: each skill ``s`` of agent ``name`` is capability ``name.s``.

    from reach.adapters import A2AAgent
    await reach.attach(A2AAgent("remote", "http://127.0.0.1:9999"))

The official ``a2a-sdk`` client (extra ``agent-reach[a2a]``) reads the agent's card at
``url/.well-known/agent-card.json`` (one capability per skill, ``reach.adapters.a2a_card``)
and speaks JSON-RPC to the card's interface. A call is one ``SendStreamingMessage`` when the
card says the agent streams (its updates arrive on that request until the task ends), else a
``SendMessage`` that returns at once followed by ``GetTask`` polls (the first at once, then
backing off from 5 ms to ``poll_max``). The caller's deadline bounds it (the gateway
cancels the attempt), and when the gateway cancels an attempt whose task the agent holds,
``CancelTask`` is forwarded.

Every attempt of one Reach task sends the same message id (``a2a_card.message_id``, from
the task id and its idempotency key), so an agent that keys on it (a Reach A2A door) joins
a retry to the run under way instead of running it twice. So an idempotent attempt past its
completion timeout is not cancelled at the agent then, as the gateway wants of every agent
(docs/protocol.md §3): its retry joins it; the agent is told to stop it when the Reach task
ends (the gateway's ``cancel(..., tell=True)``).

What an outcome means (docs/adapters.md "A2A agents"): COMPLETED → the result; FAILED,
REJECTED and the other ends Reach cannot carry on → a deliberate answer (``TaskError``,
never retried); an A2A error for a request the agent refuses (invalid params, unsupported
operation or content type) or an HTTP 4xx → an answer too; a connection refused before the
message was sent → ``Undelivered`` (failed over at once); anything after it was sent (a
connection lost, a 5xx, an internal error, a task the agent no longer knows) → a fault:
retried if the skill is idempotent, else dead-lettered. Health is a card fetch; a card
whose skills changed updates the registration in place (``Membership.update``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    A2AClientTimeoutError,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
)
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
)
from a2a.utils import errors as a2a_errors
from a2a.utils.constants import TransportProtocol

from reach.adapters import base
from reach.adapters.a2a_card import (
    TERMINAL,
    capability_table,
    content,
    message_for,
    message_id,
    outcome,
    reply_result,
    updated,
)
from reach.adapters.base import Adapter, AdapterAnswer, AdapterFault, Undelivered, declare
from reach.core import names
from reach.ports import Reply, Work

log = logging.getLogger("reach.adapters.a2a")
_PENDING = "pending.skills"  # a placeholder until the card is read (in open)
POLLS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)  # s before each GetTask, then poll_max
CANCEL_BOUND = 2.0  # s a forwarded CancelTask may take (cleanup, shielded from nothing else)
MAX_KEPT = 10_000  # timed-out attempts' agent tasks remembered until their Reach task ends
# The agent refuses this request (like HTTP 4xx): its answer is final, not a fault of its.
_REFUSALS: tuple[type[Exception], ...] = (
    a2a_errors.InvalidParamsError, a2a_errors.InvalidRequestError,
    a2a_errors.MethodNotFoundError, a2a_errors.UnsupportedOperationError,
    a2a_errors.ContentTypeNotSupportedError, a2a_errors.VersionNotSupportedError,
    a2a_errors.ExtensionSupportRequiredError, a2a_errors.JSONParseError)
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)


class A2AAgent(Adapter):
    """An A2A agent at ``url`` (its card at ``url/.well-known/agent-card.json``).

    ``skills`` sets spec fields per skill id (``{"lookup": {"idempotent": True, "params":
    {...}}}``) over what the card declares; ``headers`` go with every request (a bearer
    token); ``rpc_url`` is where JSON-RPC calls go when the card names another origin than
    ``url`` (by default that is refused: a card must not send Reach's calls elsewhere).
    ``request_timeout`` bounds each request that should answer at once (not a stream, not
    the task: the caller's deadline bounds those)."""

    kind = "a2a"
    OWN_KEYS = frozenset({"skill"})

    def __init__(self, name: str, url: str, *,
                 skills: Mapping[str, Mapping[str, Any]] | None = None,
                 headers: Mapping[str, str] | None = None, rpc_url: str | None = None,
                 max_concurrency: int = 16, health_interval: float | None = None,
                 connect_timeout: float = 10.0, request_timeout: float = 30.0,
                 poll_max: float = 1.0) -> None:
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"agent {name!r}: url must be an http(s) URL, got {url!r}")
        super().__init__(name, {_PENDING: {}}, max_concurrency=max_concurrency,
                         health_interval=health_interval)
        self.capabilities, self._routed = {}, {}
        self.url = url
        self.overrides = {sid: dict(entry) for sid, entry in (skills or {}).items()}
        self.headers = dict(headers or {})
        self.rpc_url = rpc_url
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.poll_max = poll_max
        self.card: AgentCard | None = None
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None
        self._seen = b""  # the card as last read, before ``rpc_url`` was put in
        self._streams = False  # the card says the agent streams (SendStreamingMessage)
        # (task id, attempt) of calls the gateway left without telling the agent (a
        # completion timeout), and of those whose agent task was kept for a retry to join:
        # its id, told to stop when the Reach task ends; the stops under way
        self._untold: set[tuple[str, int]] = set()
        self._kept: dict[tuple[str, int], str] = {}
        self._stops: set[asyncio.Task[None]] = set()

    def describe(self) -> dict[str, Any]:
        return {"url": self.url}

    # ------------------------------------------------------------ card and client

    async def _read_card(self) -> AgentCard:
        assert self._http is not None
        return await A2ACardResolver(self._http, self.url).get_agent_card()

    def _take(self, card: AgentCard) -> None:
        """Declare ``card``'s skills and build the client that calls its interface."""
        seen = card.SerializeToString(deterministic=True)
        card = self._pinned(card)
        # skills= naming a skill the card lacks is a mistake at attach; later, the card
        # dropping one is the agent's change, not a failing check
        table = capability_table(self.name, card, self.overrides, strict=self.card is None)
        declared = declare(self.name, table, self.OWN_KEYS)
        assert self._http is not None
        try:
            client = ClientFactory(ClientConfig(httpx_client=self._http)).create(card)
        except ValueError as exc:  # no interface this client speaks (JSON-RPC)
            raise ValueError(f"agent {self.name!r}: {exc}") from None
        self.card, self._client, self._seen = card, client, seen
        self._streams = card.capabilities.streaming
        self.capabilities = declared
        self._routed = {names.normalize(cap): d for cap, d in declared.items()}

    def _pinned(self, card: AgentCard) -> AgentCard:
        """``card`` with its JSON-RPC interfaces at ``rpc_url`` (when given), or checked to
        be at ``url``'s origin."""
        if self.rpc_url is not None:
            card = AgentCard.FromString(card.SerializeToString())
            for interface in card.supported_interfaces:
                interface.url = self.rpc_url
            return card
        home = _origin(self.url)
        for interface in card.supported_interfaces:
            if interface.protocol_binding == TransportProtocol.JSONRPC and \
                    _origin(interface.url) != home:
                raise ValueError(
                    f"agent {self.name!r}: the card sends calls to {interface.url!r}, not "
                    f"to {home}; pass rpc_url= to call the agent there (or elsewhere)")
        return card

    async def open(self) -> None:
        # No read timeout by default: a streamed task may be quiet for longer than any one
        # request should take; the caller's deadline bounds it. Requests that should answer
        # at once (SendMessage when polled, GetTask, CancelTask) carry ``request_timeout``.
        self._http = httpx.AsyncClient(headers=self.headers, timeout=httpx.Timeout(
            None, connect=self.connect_timeout))
        try:
            async with asyncio.timeout(self.connect_timeout):
                card = await self._read_card()
            self._take(card)
        except BaseException as exc:
            await self.shut()
            if isinstance(exc, ValueError):
                raise
            raise ValueError(f"agent {self.name!r}: could not read the A2A agent's card at "
                             f"{self.url}: {exc!r}") from None

    async def shut(self) -> None:
        for stop in list(self._stops):
            stop.cancel()
        await asyncio.gather(*self._stops, return_exceptions=True)
        self._kept.clear()
        http, self._http, self._client = self._http, None, None
        if http is not None:
            await http.aclose()

    def cancel(self, task_id: str, attempt: int, *, tell: bool = True) -> None:
        """The gateway gives the attempt up. ``tell=False`` (a completion timeout): an
        idempotent skill's agent task is kept for the retry to join; ``tell=True`` for an
        attempt kept so: the agent is told to stop it now."""
        key = (task_id, attempt)
        if not tell and key in self._calls:
            self._untold.add(key)
        elif tell:  # (told before its call saw the first cancel: that call forwards it)
            self._untold.discard(key)
        kept = self._kept.pop(key, None) if tell else None
        client = self._client
        if kept is not None and client is not None:
            stop = asyncio.get_running_loop().create_task(self._forward_cancel(
                client, kept, self._context(None, bounded=True)))
            self._stops.add(stop)
            stop.add_done_callback(self._stops.discard)
        super().cancel(task_id, attempt, tell=tell)

    # ------------------------------------------------------------ calls

    def _context(self, work: Work | None, bounded: bool) -> ClientCallContext:
        traceparent = None if work is None else base.traceparent_of(work)
        return ClientCallContext(
            timeout=self.request_timeout if bounded else None,
            service_parameters={"traceparent": traceparent} if traceparent else None)

    async def invoke(self, work: Work, how: dict[str, Any], reply: Reply) -> Any:
        client = self._client
        if client is None:
            raise Undelivered(f"agent {self.name!r} is not open (attach it with reach.attach)")
        message = message_for(how["skill"], work.params, {
            "task_id": work.task_id, "attempt": work.attempt, "caller": work.caller,
            "idempotency_key": work.idempotency_key},
            message_id(work.task_id, work.idempotency_key))
        # Streamed: the task's updates arrive on the one request as they happen. Else the
        # agent answers at once with the task, which is then polled.
        request = SendMessageRequest(message=message, configuration=SendMessageConfiguration(
            return_immediately=not self._streams))
        context = self._context(work, bounded=not self._streams)
        declared = self._routed.get(work.capability)
        chunks = _Chunks(reply) if declared is not None and declared.spec.streaming else None
        task: Task | None = None
        try:
            events = cast("AsyncGenerator[StreamResponse, None]",
                          client.send_message(request, context=context))
            async with aclosing(events):
                async for event in events:
                    if event.HasField("message"):
                        return reply_result(event.message)
                    task = updated(task, event)
                    if chunks is not None and event.HasField("artifact_update"):
                        chunks.send(content(event.artifact_update.artifact.parts))
                    if task.status.state in TERMINAL:
                        break
            if task is None:
                raise AdapterFault("the A2A agent answered SendMessage with nothing")
            if task.status.state not in TERMINAL:  # not streamed, or the stream ended early
                context = self._context(work, bounded=True)
                task = await self._follow(client, task, context)
        except asyncio.CancelledError:
            if task is not None and task.id and task.status.state not in TERMINAL:
                attempt = (work.task_id, work.attempt)
                if attempt in self._untold and declared is not None and \
                        declared.spec.idempotent:  # its retry joins it: stopped at the end
                    self._kept[attempt] = task.id
                    while len(self._kept) > MAX_KEPT:
                        del self._kept[next(iter(self._kept))]
                else:
                    await self._forward_cancel(client, task.id, context)
            raise
        except (AdapterFault, AdapterAnswer):
            raise
        except Exception as exc:
            raise self._translated(exc, sent=task is not None) from None
        finally:
            self._untold.discard((work.task_id, work.attempt))
        result = outcome(task)
        if chunks is None:
            return result
        if not chunks.sent:  # polled: the artifacts arrive together, at the end
            for artifact in task.artifacts:
                chunks.send(content(artifact.parts))
        return chunks.sent

    async def _follow(self, client: Client, task: Task, context: ClientCallContext) -> Task:
        """Poll the task until it ends (backing off to ``poll_max``)."""
        polls = 0
        while task.status.state not in TERMINAL:
            await asyncio.sleep(POLLS[polls] if polls < len(POLLS) else self.poll_max)
            polls += 1
            task = await client.get_task(GetTaskRequest(id=task.id, history_length=0),
                                         context=context)
        return task

    async def _forward_cancel(self, client: Client, task_id: str,
                              context: ClientCallContext) -> None:
        """Tell the agent to stop ``task_id`` (the gateway gave up on it): best effort,
        bounded, logged when it fails; the cancellation itself goes on."""
        try:
            await asyncio.wait_for(client.cancel_task(CancelTaskRequest(id=task_id),
                                                      context=context), CANCEL_BOUND)
        except Exception as exc:  # a task already ended, or the agent gone: nothing to stop
            log.info("agent %s: CancelTask %s not carried: %r", self.name, task_id, exc)

    def _translated(self, exc: Exception, *, sent: bool) -> Exception:
        """An SDK error → ``Undelivered``, ``AdapterAnswer`` or ``AdapterFault``."""
        cause = exc.__cause__
        if isinstance(exc, A2AClientTimeoutError):
            return AdapterFault(f"the A2A agent did not answer within "
                                f"{self.request_timeout:g} s")
        if isinstance(cause, _NOT_SENT) and not sent:
            return Undelivered(f"the A2A agent at {self.url} refused: {cause!r}")
        if isinstance(cause, httpx.HTTPStatusError):
            status = cause.response.status_code
            what = f"the A2A agent answered HTTP {status}"
            if 400 <= status < 500 and status not in (408, 429):
                return AdapterAnswer(what, status=status)
            return AdapterFault(what, status=status)
        if isinstance(exc, A2AClientError):
            return AdapterFault(f"the A2A call broke: {exc}")
        if isinstance(exc, _REFUSALS):
            return AdapterAnswer(f"the A2A agent refused: {exc}", a2a_error=type(exc).__name__)
        if isinstance(exc, a2a_errors.TaskNotFoundError):
            return AdapterFault(f"the A2A agent no longer knows the task (restarted?): {exc}")
        return AdapterFault(f"the A2A agent failed: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------ health

    async def check(self) -> bool:
        """Fetch the card: the agent answers; a card whose skills changed is taken up."""
        if self._http is None:
            return False
        card = await self._read_card()
        if self.card is not None and card.SerializeToString(deterministic=True) != self._seen:
            self._take(card)
            if self.membership is not None:
                self.membership.update(self, self.specs)
        return True


class _Chunks:
    """A streaming capability's chunks: each artifact update's content, sent on as it comes;
    the result is their list (Reach's convention, docs/protocol.md "Streaming")."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.sent: list[Any] = []

    def send(self, value: Any) -> None:
        self.reply.chunk(len(self.sent), value)
        self.sent.append(value)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"
