"""How an agent logs its handlers' faults: one line per failed attempt, the traceback once.

A call retried three times on one agent logged three full tracebacks (issue 14); now the
first failure of a task here logs its traceback and each later attempt one line. Which tasks
have logged one is remembered for the last ``FAULTS_KEPT`` of them.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from reach.wire import protocol as p

log = logging.getLogger("reach.agent")
FAULTS_KEPT = 1024  # tasks remembered as having logged their traceback (then the oldest go)


class FaultLog:
    """One agent's record of which tasks' tracebacks it has logged."""

    def __init__(self) -> None:
        self.logged: OrderedDict[str, None] = OrderedDict()

    def fault(self, agent: str, f: p.Invoke, exc: Exception) -> None:
        """Log that the handler for invoke ``f`` raised ``exc`` (an agent fault)."""
        if f.task_id in self.logged:
            log.error("agent %s: handler for %s failed again (task %s, attempt %d): %s: %s",
                      agent, f.capability, f.task_id, f.attempt, type(exc).__name__, exc)
            return
        self.logged[f.task_id] = None
        if len(self.logged) > FAULTS_KEPT:
            self.logged.popitem(last=False)
        log.error("agent %s: handler for %s failed (task %s, attempt %d)", agent,
                  f.capability, f.task_id, f.attempt, exc_info=exc)
