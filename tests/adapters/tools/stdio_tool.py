#!/usr/bin/env python3
"""A JSON-lines tool for ProcessAgent's stdio tests: one request per stdin line, one reply per
stdout line, each call on its own thread (so replies come back in any order).

params["op"]:  echo · sleep (params["s"] seconds, then echo) · hang (never replies) ·
crash (a line on stderr, then exit 3) · answer / fault (an error reply) · garbage (a stray
line, then echo) · long (a reply line of params["n"] bytes) · chunks (params["n"] chunk lines,
then the result) · cancelled (the ids Reach sent a cancel line for).
"""

import json
import os
import sys
import threading
import time

lock = threading.Lock()
cancelled: list[int] = []
CONTEXT = ("capability", "task_id", "attempt", "trace_id", "traceparent", "caller",
           "idempotency_key", "deadline_ms", "parent_task_id")


def send(obj: object) -> None:
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def echo(msg: dict) -> dict:
    return {"params": msg["params"], "pid": os.getpid(), "cwd": os.getcwd(),
            "my_var": os.environ.get("MY_VAR"),
            "context": {k: msg[k] for k in CONTEXT if k in msg}}


def handle(msg: dict) -> None:
    rid, params = msg["id"], msg["params"]
    op = params.get("op", "echo")
    if op == "sleep":
        time.sleep(params["s"])
    elif op == "hang":
        return
    elif op == "crash":
        sys.stderr.write("fatal: out of cheese\n")
        sys.stderr.flush()
        os._exit(3)
    elif op == "answer":
        return send({"id": rid, "error": {"message": "no such thing", "answer": True,
                                          "status": 404}})
    elif op == "fault":
        return send({"id": rid, "error": {"message": "backend down"}})
    elif op == "garbage":
        with lock:
            sys.stdout.write("a stray line, not JSON\n")
    elif op == "long":
        return send({"id": rid, "result": "x" * params["n"]})
    elif op == "chunks":
        for i in range(params["n"]):
            send({"id": rid, "chunk": f"part {i}"})
    elif op == "cancelled":
        return send({"id": rid, "result": list(cancelled)})
    send({"id": rid, "result": echo(msg)})


def main() -> None:
    print("stdio tool ready (a banner, not JSON)", flush=True)
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("cancel"):
            cancelled.append(msg["id"])
        elif msg.get("ping"):
            send({"id": msg["id"], "result": "pong"})
        else:
            threading.Thread(target=handle, args=(msg,), daemon=True).start()


if __name__ == "__main__":
    main()
