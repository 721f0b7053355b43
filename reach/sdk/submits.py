"""The ``submit`` frame a ``SubmitRequest`` becomes, checked on the caller's side first.

Checked here, so a bad argument raises at once, where the caller made it, rather than coming
back as an error frame; the coordinator checks everything again when it parses the frame.
"""

from __future__ import annotations

import os

from reach.core import chains
from reach.core import tags as tagging
from reach.core.tasks import SubmitRequest
from reach.errors import InvalidParams, ProtocolError, ReachTimeout
from reach.wire import protocol as p
from reach.wire.numbers import finite, refusal

_Submit = p.unchecked(p.Submit)  # checked by ``check``; the coordinator parses it anyway


def submit_frame(req_id: int, r: SubmitRequest, *, defer_ack: bool, limit: int) -> str:
    """The frame for ``r`` as request ``req_id``, at most ``limit`` bytes. ``caller`` stays out:
    the coordinator knows it from the connection."""
    check(r)
    # Every submit carries a key (one is made up when the caller gave none), so sending it
    # again after a lost connection can never start a second task.
    text = p.dump(_Submit(
        id=req_id, capability=r.capability, params=r.params,
        idempotency_key=r.idempotency_key or os.urandom(16).hex(), priority=r.priority,
        timeout=r.timeout, max_retries=r.max_retries, trace_id=r.trace_id,
        parent_task_id=r.parent_task_id, traceparent=r.traceparent, wait=True,
        intent=r.intent, defer_ack=defer_ack, hedge=r.hedge, tags=tagging.check(r.tags),
        fallback=r.fallback, queue_wait=r.queue_wait, notify=r.notify, then=r.then))
    size = p.oversize(text, limit)
    if size is not None:
        raise ProtocolError(f"the submit is {size} bytes, over the {limit}-byte frame limit; "
                            f"send a reference to large data instead of the data")
    return text


def check(r: SubmitRequest) -> None:
    """Raise what the coordinator would refuse ``r`` for, without asking it."""
    if not r.capability and not r.intent:
        raise InvalidParams("name a capability (or state an intent)")
    if not isinstance(r.params, dict):
        raise InvalidParams(f"params must be a dict of name: value (a JSON object), not "
                            f"{type(r.params).__name__}: call(capability, {{'name': value}})")
    if r.params and not finite(r.params):  # sent, NaN and inf would reach the agent as null
        raise refusal("submit", "params", r.params)
    if len(r.capability) > 200 or (r.idempotency_key is not None
                                   and len(r.idempotency_key) > 400):
        raise InvalidParams("capability names are at most 200 characters, keys at most 400")
    if not 0 <= r.priority <= 9:
        raise InvalidParams(f"priority must be 0..9 (9 highest), not {r.priority}")
    if r.timeout is not None and r.timeout <= 0:
        raise ReachTimeout(f"the deadline has already passed (timeout={r.timeout})")
    if r.max_retries is not None and not 0 <= r.max_retries <= 100:
        raise InvalidParams(f"max_retries must be 0..100, not {r.max_retries}")
    if r.fallback is not None:
        try:
            p.fallback_of(r.fallback)
        except ValueError as exc:  # pydantic's ValidationError is one
            raise InvalidParams(f"bad fallback {r.fallback!r}: {exc}") from None
    if r.notify is not None or r.then is not None:
        try:
            chains.follow_of(r.notify, r.then)
        except ValueError as exc:
            raise InvalidParams(str(exc)) from None
