"""Command-line agents: a program reached as it is, per call or over stdio (docs/adapters.md).

    ProcessAgent("geo", ["python", "geo.py"], capabilities={
        "geo.lookup": {"args": ["--region", "{region}"], "idempotent": True}})   # per call
    ProcessAgent("nlp", ["python", "nlp_server.py"], mode="stdio", capabilities={...})

``per-call`` runs the command once per call: the params as one JSON document on stdin (or
filled into ``args`` templates, one argv item each, never through a shell), the call's
context in ``REACH_*`` environment variables, the result as JSON on stdout. Exit code 0 is a
result; a code listed in ``answer_codes`` is a deliberate answer (stderr's tail its message);
any other code, a signal, stdout that is not JSON or more than ``max_output`` bytes of it is a
fault of the agent, its message carrying stderr's tail or an excerpt of what was printed. A
call the gateway gives up on (timeout, hedge lost, detach) ends the command's whole process
group (process_call.py).

``stdio`` keeps one process running and multiplexes calls over its stdin and stdout as JSON
lines (process_stdio.py says the protocol and how it is restarted).
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from reach.adapters.base import Adapter, AdapterAnswer, AdapterFault
from reach.adapters.process_args import (
    MissingParam,
    Template,
    argv_list,
    base_env,
    context_env,
    context_fields,
    resolve,
    templates,
)
from reach.adapters.process_call import Finished, Overflow, run
from reach.adapters.process_stdio import EXCERPT, Supervisor
from reach.adapters.process_user import run_as
from reach.core import names
from reach.core.backoff import Backoff
from reach.ports import Reply, Work
from reach.wire.numbers import loads_finite

MODES = ("per-call", "stdio")
INPUTS = ("json", "text", "none")
OUTPUTS = ("json", "text")
PER_CALL_KEYS = ("args", "input", "output", "answer_codes")


@dataclass(slots=True)
class _Plan:
    """How one capability's call is carried (per-call mode reads all of it)."""

    capability: str  # as declared: what the command is told
    args: list[Template] = field(default_factory=list)
    input: str = "json"
    output: str = "json"
    answer_codes: frozenset[int] = frozenset()


class ProcessAgent(Adapter):
    """An agent that is a command: run per call, or one long-lived JSON-lines process.

    Per-capability keys (per-call mode): ``args`` (argument templates appended to ``argv``,
    ``"{name}"`` filled from the params), ``input`` (``"json"``: the params on stdin, the
    default; ``"text"``: the ``text`` param as it is; ``"none"``), ``output`` (``"json"``, the
    default, or ``"text"``: stdout wrapped as ``{"text": ...}``) and ``answer_codes`` (exit
    codes that mean a deliberate answer; the agent's ``answer_codes`` by default).
    """

    kind: ClassVar[str] = "process"
    OWN_KEYS: ClassVar[frozenset[str]] = frozenset(PER_CALL_KEYS)

    def __init__(self, name: str, argv: list[str], capabilities: Mapping[str, Any] | Iterable[Any],
                 *, mode: str = "per-call", max_concurrency: int = 8,
                 env: dict[str, str] | None = None, inherit_env: bool = False,
                 cwd: str | None = None, answer_codes: list[int] | None = None,
                 max_output: int = 16 << 20, kill_grace: float = 0.5,
                 restart_delay: float = 0.1, restart_max: float = 30.0, ping: bool = False,
                 user: str | int | None = None, group: str | int | None = None,
                 version: str = "0", health_interval: float | None = None) -> None:
        super().__init__(name, capabilities, max_concurrency=max_concurrency, version=version,
                         health_interval=health_interval)
        if mode not in MODES:
            raise ValueError(f"agent {name!r}: mode must be one of {list(MODES)}, not {mode!r}")
        self.mode = mode
        self.argv = argv_list(name, argv)
        if cwd is not None and (not isinstance(cwd, str) or not os.path.isdir(cwd)):
            raise ValueError(f"agent {name!r}: cwd {cwd!r} is not a directory")
        self.cwd = cwd
        self.run_as = run_as(name, user, group)  # None: the coordinator's own user
        self.env = base_env(name, env, bool(inherit_env),
                            over=None if self.run_as is None else self.run_as.env())
        self._popen = {} if self.run_as is None else self.run_as.popen()
        self.program = resolve(name, self.argv[0], self.env.get("PATH"), cwd)
        _positive(name, "max_output", max_output, int)
        _positive(name, "kill_grace", kill_grace, (int, float))
        _positive(name, "restart_delay", restart_delay, (int, float))
        _positive(name, "restart_max", restart_max, (int, float))
        self.max_output, self.kill_grace = max_output, float(kill_grace)
        default_codes = _codes(f"agent {name!r}", answer_codes or [])
        if mode == "stdio" and answer_codes:
            raise ValueError(f"agent {name!r}: answer_codes apply to mode = 'per-call'; a "
                             f"stdio process answers with {{\"error\": {{..., \"answer\": "
                             f"true}}}}")
        if mode != "stdio" and ping:
            raise ValueError(f"agent {name!r}: ping applies to mode = 'stdio' only")
        self.ping = bool(ping)
        self._plans = {names.normalize(n): self._plan(n, d.how, default_codes)
                       for n, d in self.capabilities.items()}
        self._label = shlex.join([os.path.basename(self.argv[0]), *self.argv[1:]])[:120]
        self._stdio: Supervisor | None = None
        if mode == "stdio":
            self._stdio = Supervisor(
                name, self.program, self.argv[1:], env=self.env, cwd=cwd, max_line=max_output,
                popen=self._popen,
                grace=self.kill_grace, backoff=Backoff(
                    base=float(restart_delay), factor=2.0, cap=float(max(restart_max,
                                                                         restart_delay)),
                    jitter=0.5, mode="below"))

    def _plan(self, capability: str, how: dict[str, Any], codes: frozenset[int]) -> _Plan:
        where = f"agent {self.name!r}, capability {capability!r}"
        if self.mode == "stdio" and how:
            raise ValueError(f"{where}: {sorted(how)} apply to mode = 'per-call' only; a "
                             f"stdio process gets the params in its request line")
        plan = _Plan(capability, templates(self.name, capability, how.get("args", [])),
                     how.get("input", "json"), how.get("output", "json"), codes)
        if plan.input not in INPUTS:
            raise ValueError(f"{where}: input must be one of {list(INPUTS)}, not "
                             f"{plan.input!r}")
        if plan.output not in OUTPUTS:
            raise ValueError(f"{where}: output must be one of {list(OUTPUTS)}, not "
                             f"{plan.output!r}")
        if "answer_codes" in how:
            plan.answer_codes = _codes(where, how["answer_codes"])
        return plan

    # ------------------------------------------------------------ Adapter

    def describe(self) -> dict[str, Any]:
        who = {} if self.run_as is None else {"uid": self.run_as.uid, "gid": self.run_as.gid}
        return {"argv": list(self.argv), "mode": self.mode, **who}

    @property
    def pid(self) -> int | None:
        """The stdio process's pid while it runs (None in per-call mode)."""
        proc = self._stdio.proc if self._stdio is not None else None
        return proc.pid if proc is not None else None

    @property
    def restarts(self) -> int:
        """How many times the stdio process was started again after it ended."""
        return self._stdio.restarts if self._stdio is not None else 0

    async def open(self) -> None:
        if self._stdio is not None:
            await self._stdio.start()

    async def shut(self) -> None:
        if self._stdio is not None:
            await self._stdio.stop()

    async def check(self) -> bool:
        """Per call: the program is still there to run. Stdio: the process runs (and, with
        ``ping``, answers ``{"id": n, "ping": true}`` within the check's bound)."""
        if self._stdio is None:
            return os.access(self.program, os.X_OK) and (self.cwd is None
                                                         or os.path.isdir(self.cwd))
        if not self._stdio.running:
            return False
        if self.ping:
            await self._stdio.call({"ping": True})
        return True

    async def invoke(self, work: Work, how: dict[str, Any], reply: Reply) -> Any:
        plan = self._plans[work.capability]
        if self._stdio is not None:
            return await self._over_stdio(work, plan, reply)
        try:
            args = [t.fill(work.params) for t in plan.args]
            stdin = self._stdin(plan, work.params)
        except MissingParam as exc:
            raise AdapterAnswer(str(exc)) from None
        env = {**self.env, **context_env(work, plan.capability)}
        try:
            done = await run(self.program, [*self.argv[1:], *args], stdin=stdin, env=env,
                             cwd=self.cwd, max_output=self.max_output, grace=self.kill_grace,
                             popen=self._popen)
        except Overflow as exc:
            raise AdapterFault(f"command {self._label!r} {exc}; it was stopped (print less, "
                               f"or raise the agent's max_output)") from None
        return self._outcome(done, plan)

    # ------------------------------------------------------------ per call

    @staticmethod
    def _stdin(plan: _Plan, params: dict[str, Any]) -> bytes | None:
        if plan.input == "none":
            return None
        if plan.input == "text":
            text = params.get("text")
            if not isinstance(text, str):
                raise MissingParam("this command reads the string parameter 'text' on its "
                                   "input; the call did not give one")
            return text.encode()
        return json.dumps(params, separators=(",", ":")).encode() + b"\n"

    def _outcome(self, done: Finished, plan: _Plan) -> Any:
        tail = done.stderr_tail.decode("utf-8", "replace").strip()
        code = done.code
        if code in plan.answer_codes:
            raise AdapterAnswer(tail or f"command {self._label!r} answered with exit code "
                                        f"{code}", exit_code=code)
        if code != 0:
            how = (f"was killed by {_signame(-code)}" if code < 0
                   else f"exited with code {code}")
            raise AdapterFault(f"command {self._label!r} {how}; stderr (last "
                               f"{len(done.stderr_tail)} bytes): {tail or '(empty)'}",
                               exit_code=code)
        if plan.output == "text":
            return {"text": done.stdout.decode("utf-8", "replace")}
        try:
            return loads_finite(done.stdout)
        except ValueError as exc:
            if not done.stdout.strip():
                raise AdapterFault(f"command {self._label!r} printed nothing on stdout; it "
                                   f"should print its result as JSON (or declare output = "
                                   f"\"text\")") from None
            excerpt = done.stdout[:EXCERPT].decode("utf-8", "replace")
            raise AdapterFault(f"command {self._label!r} printed something that is not JSON "
                               f"on stdout ({exc}); it began: {excerpt!r}. Print one JSON "
                               f"document, or declare output = \"text\"") from None

    # ------------------------------------------------------------ stdio

    async def _over_stdio(self, work: Work, plan: _Plan, reply: Reply) -> Any:
        assert self._stdio is not None
        seq = itertools.count()
        msg = await self._stdio.call(context_fields(work, plan.capability),
                                     lambda data: reply.chunk(next(seq), data))
        if "result" in msg:
            return msg["result"]
        error = msg.get("error")
        if isinstance(error, dict):
            message = str(error.get("message") or "the process reported an error")
            details = {k: v for k, v in error.items() if isinstance(k, str)
                       and k not in ("message", "answer", "agent")}
            if error.get("answer") is True:
                raise AdapterAnswer(message, **details)
            raise AdapterFault(message, **details)
        if isinstance(error, str):
            raise AdapterFault(error)
        raise AdapterFault(f"the process of {self.name!r} replied without \"result\" or "
                           f"\"error\": {json.dumps(msg)[:EXCERPT]}")


def _positive(agent: str, key: str, value: Any, types: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, types) or value <= 0:
        raise ValueError(f"agent {agent!r}: {key} must be a positive number, not {value!r}")


def _codes(where: str, codes: Any) -> frozenset[int]:
    if not isinstance(codes, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 255 for c in codes):
        raise ValueError(f"{where}: answer_codes must be a list of exit codes from 1 to 255, "
                         f"such as [2]")
    return frozenset(codes)


def _signame(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
