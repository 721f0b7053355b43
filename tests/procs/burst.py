"""A caller that sends N submits back to back on one connection, then reads every answer and
prints how many of each kind came back (a JSON line). The attacker of the submit-burst test:
a process of its own, as a real flood would be, so its work is not counted as the
coordinator's stall."""

from __future__ import annotations

import argparse
import asyncio
import collections
import json

import websockets


async def main(url: str, caller: str, capability: str, count: int) -> None:
    # No keepalive of its own: its pings would queue behind its own flood, and a drain longer
    # than websockets' 20 + 20 s (under coverage on a loaded machine) closed it mid-burst.
    async with websockets.connect(url, max_size=None, ping_interval=None) as ws:
        await ws.send(json.dumps({"v": 1, "type": "hello", "caller": caller}))
        json.loads(await ws.recv())
        frames = [json.dumps({"v": 1, "type": "submit", "id": i, "capability": capability,
                              "params": {"n": i}, "wait": False, "max_retries": 0})
                  for i in range(count)]
        answers: collections.Counter[str] = collections.Counter()

        async def read() -> None:
            while sum(answers.values()) < count:
                frame = json.loads(await ws.recv())
                answers[frame["type"] if frame["type"] != "error"
                        else frame["error"]["code"]] += 1

        async def send() -> None:
            for frame in frames:
                await ws.send(frame)

        await asyncio.gather(send(), read())
        print(json.dumps(dict(answers)), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--caller", default="mallory")
    parser.add_argument("--capability", default="bulk.work")
    parser.add_argument("--count", type=int, default=20_000)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.caller, args.capability, args.count))
