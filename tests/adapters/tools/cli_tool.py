#!/usr/bin/env python3
"""A command-line tool for ProcessAgent's per-call tests: ``cli_tool.py MODE [ARGS...]``.

    echo [ARGS]          print what it was given: stdin's JSON, its arguments, its REACH_*
                         environment (and MY_VAR, REACH_TEST_SECRET), its working directory
    flaky FILE N [ARGS]  append a line to FILE; exit 1 while FILE has at most N lines, then echo
    fail                 5 KiB of noise, then the real reason, on stderr; exit 1
    answer               "no such order" on stderr; exit 2
    garbage              print a line that is not JSON; exit 0
    flood N              print N bytes on stdout
    hang FILE            start a grandchild; both ignore SIGTERM; write "PID GRANDCHILD_PID"
                         to FILE, then sleep
"""

import json
import os
import signal
import subprocess
import sys
import time

SEEN_ENV = ("MY_VAR", "REACH_TEST_SECRET", "TRACEPARENT")


def echo(args: list[str]) -> None:
    raw = sys.stdin.read()
    env = {k: v for k, v in os.environ.items() if k.startswith("REACH_") or k in SEEN_ENV}
    print(json.dumps({"stdin": json.loads(raw) if raw.strip() else None, "argv": args,
                      "env": env, "cwd": os.getcwd()}))


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "echo":
        echo(args)
    elif mode == "flaky":
        with open(args[0], "a") as f:
            f.write("run\n")
        with open(args[0]) as f:
            runs = len(f.readlines())
        if runs <= int(args[1]):
            sys.stderr.write(f"flaky: failing run {runs}\n")
            sys.exit(1)
        echo(args[2:])
    elif mode == "fail":
        sys.stderr.write("noise " * 1000 + "\nfatal: the real reason: disk full\n")
        sys.exit(1)
    elif mode == "answer":
        sys.stderr.write("no such order\n")
        sys.exit(2)
    elif mode == "garbage":
        print("hello, this is not JSON")
    elif mode == "flood":
        sys.stdout.write("x" * int(args[0]))
    elif mode == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the grandchild
        sleeper = "import time; time.sleep(60)"  # never waited out: the group is killed
        child = subprocess.Popen([sys.executable, "-c", sleeper])
        with open(args[0], "w") as f:
            f.write(f"{os.getpid()} {child.pid}")
        time.sleep(60)  # never waited out: the adapter kills the group
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
