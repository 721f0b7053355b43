"""The Celery peer: a no-op task that hands its argument back, with Redis as broker and result
backend. ``relay.py`` starts the worker as a child (``python bench/celery_app.py --pool ...``)
and its caller submits ``echo`` and waits for each result.

Configuration is the fast path a team would choose for short request-reply tasks: JSON, no
task events, no rate limits, no heartbeat/gossip/mingle between workers, early acks, a prefetch
window wide enough for every call in flight, results kept briefly. The Redis URL (a dedicated
db number: the benchmark flushes that db, and only it, before and after the run) and the queue
name come from the environment so the parent and both children agree on them:

    REACH_BENCH_REDIS         redis://127.0.0.1:6379/14
    REACH_BENCH_CELERY_QUEUE  reach-bench

As a child it follows the benchmark's protocol on stdin/stdout: ``BENCH READY`` once the
worker consumes, ``cpu`` answered with the CPU seconds of the worker and its pool processes,
and stdin closing (the parent gone) makes it shut down (Celery's warm shutdown, via SIGTERM).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from celery import Celery
from celery.signals import worker_ready

REDIS_URL = os.environ.get("REACH_BENCH_REDIS", "redis://127.0.0.1:6379/14")
QUEUE = os.environ.get("REACH_BENCH_CELERY_QUEUE", "reach-bench")
PREFETCH = 256  # per pool slot: more than the 64 calls in flight, so none waits on a fetch

app = Celery("reach_bench", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_serializer="json", result_serializer="json", accept_content=["json"],
    task_default_queue=QUEUE, task_acks_late=False, task_ignore_result=False,
    worker_prefetch_multiplier=PREFETCH, worker_disable_rate_limits=True,
    worker_send_task_events=False, task_send_sent_event=False,
    worker_redirect_stdouts=False, worker_hijack_root_logger=False,
    result_expires=300, broker_pool_limit=128,
    broker_connection_retry_on_startup=True,
    # The caller submits on its event loop and reads results on a drainer thread: both
    # threads must see the one backend (Celery serialises its pub/sub reads).
    result_backend_thread_safe=True,
)


@app.task(name="bench.echo")
def echo(payload: Any) -> Any:
    """The no-op: the payload goes back as the result."""
    return payload


# -------------------------------------------------------------------- the worker as a child

_out_lock = threading.Lock()


def _say(*parts: Any) -> None:
    # Straight to fd 1: Celery may wrap sys.stdout, and two threads write here.
    with _out_lock:
        os.write(1, (" ".join(["BENCH", *(str(p) for p in parts)]) + "\n").encode())


def _cpu_seconds() -> float:
    import psutil
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _watch_stdin() -> None:
    """Answer ``cpu``; on EOF or ``quit``, ask the worker to stop as a supervisor would."""

    def read() -> None:
        # os.read, not sys.stdin: a thread blocked inside sys.stdin holds its buffer's lock,
        # and a prefork pool process forked meanwhile deadlocks closing its copy of stdin.
        pending = b""
        try:
            while chunk := os.read(0, 4096):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for word in (ln.strip().decode() for ln in lines):
                    if word == "cpu":
                        _say("CPU", _cpu_seconds())
                    elif word == "quit":
                        return os.kill(os.getpid(), signal.SIGTERM)
                    elif word:
                        _say("ERR", "unknown-command", word)
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=read, name="bench-stdin", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the benchmark's Celery worker (a child process)")
    ap.add_argument("--pool", default="solo", choices=("solo", "threads", "prefork"))
    ap.add_argument("--concurrency", type=int, default=1)
    args = ap.parse_args(argv)

    @worker_ready.connect
    def ready(**_: Any) -> None:
        _say("READY", f"{REDIS_URL} queue={QUEUE} pool={args.pool} -c {args.concurrency}")

    _watch_stdin()
    app.worker_main(["worker", "--pool", args.pool, "--concurrency", str(args.concurrency),
                     "--queues", QUEUE, "--hostname", f"reach-bench-{os.getpid()}@%h",
                     "--without-heartbeat", "--without-gossip", "--without-mingle",
                     "--loglevel", "WARNING"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
