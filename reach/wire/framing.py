"""The two WebSocket frames every call is made of, framed and found by hand (RFC 6455 §5.2).

Every frame of a call is one whole text message: unfragmented, uncompressed (Reach opens its
connections with ``compression=None``), at most ``max_frame_bytes``. websockets builds a
``Frame`` object for each, serializes it through a ``BytesIO`` and, on the way in, runs a
chain of generators that read its header a few bytes at a time: about a microsecond to send
a frame and three to receive one, measured, where the bytes themselves take a fifth of that.
A call at the coordinator is two frames in and three out.

So the common frame is handled here, as plain bytes: ``frame`` builds a final text frame
(masked with a fresh key from a client, as the RFC requires, not from a server), and
``find`` reads the frame at an offset of what came off the socket. Everything else
(a control frame, a fragment, reserved bits, a frame past the size limit, a frame masked the
wrong way for its side) is left to websockets, whole (``reach.wire.inbound``, ``reach.wire.
outbox``), so its protocol state, errors and close codes stay its own.
"""

from __future__ import annotations

import os

from websockets.speedups import apply_mask

__all__ = ["BINARY", "TEXT", "find", "frame"]

TEXT, BINARY = 0x81, 0x82  # first byte of a final text / binary frame, no reserved bits
_MASKED = 0x80


def frame(data: bytes, masked: bool) -> bytes:
    """A final text frame carrying ``data``; ``masked``: a client's, under a random key."""
    size = len(data)
    second = _MASKED if masked else 0
    if size < 126:
        head = bytes((TEXT, second | size))
    elif size < 65536:
        head = bytes((TEXT, second | 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((TEXT, second | 127)) + size.to_bytes(8, "big")
    if not masked:
        return head + data
    key = os.urandom(4)
    return head + key + apply_mask(data, key)


def find(data: bytes, at: int) -> tuple[int, int, int, bytes | None] | None:
    """The frame that starts at ``data[at]``: (its first byte, where its payload starts,
    where it ends, its mask key or None), or None until its length has come. The rest may
    not have come yet (``end > len(data)``), its mask key included: the size is known, and
    judged, from the first 2 to 10 bytes, as websockets judges it."""
    left = len(data) - at
    if left < 2:
        return None
    first, second = data[at], data[at + 1]
    size = second & 0x7F
    start = at + 2
    if size == 126:
        if left < 4:
            return None
        size = int.from_bytes(data[start:start + 2], "big")
        start += 2
    elif size == 127:
        if left < 10:
            return None
        size = int.from_bytes(data[start:start + 8], "big")
        start += 8
    if second & _MASKED:  # (a key not all here yet is cut short, and so is the frame)
        return first, start + 4, start + 4 + size, data[start:start + 4]
    return first, start, start + size, None

