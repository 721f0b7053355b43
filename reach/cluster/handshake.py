"""The peer handshake (pure): both nodes prove they know the cluster's peer secret, and
neither sends it (docs/protocol.md §14).

    A → B  hello      {role: "peer", node: A, nonce: nA}
    B → A  challenge  {node: B, nonce: nB, proof: mac("holder", A, B, nA, nB)}
    A → B  proof      {proof: mac("dialer", A, B, nA, nB)}
    B → A  welcome    {role: "peer", node: B, ...}, then B's agents

``mac`` is HMAC-SHA256 keyed by the secret over the lines ``reach-peer-v1``, the role, both
node ids and both nonces (joined by ``\\n``: a name never holds a line break), in lowercase
hex. Each side picks a fresh random nonce per link, so a proof answers one link only; the
role in the message keeps a holder's proof from being replayed as a dialer's (or back). A
node checks the other's proof with ``hmac.compare_digest`` before it sends anything else: a
listener that does not know the secret learns no token, is sent no forward, and none of its
agents is mirrored; a dialer that does not know it is sent no agent.

A hello naming the holder's own node is refused with ``details.same_node``; the refusal
carries ``mac("same-node", B, B, nA, "")`` so the dialer stops dialling that URL only when
its own node answered, not when any listener says so.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Literal

VERSION = "reach-peer-v1"
Role = Literal["holder", "dialer", "same-node"]


def new_nonce() -> str:
    """A fresh nonce: 16 random bytes in hex."""
    return secrets.token_hex(16)


def mac(secret: str, role: Role, dialer: str, holder: str, dialer_nonce: str,
        holder_nonce: str) -> str:
    """The proof ``role`` gives of knowing ``secret`` on the link between ``dialer`` and
    ``holder`` with these nonces."""
    message = "\n".join((VERSION, role, dialer, holder, dialer_nonce, holder_nonce))
    return hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()


def proves(given: str, secret: str, role: Role, dialer: str, holder: str,
           dialer_nonce: str, holder_nonce: str) -> bool:
    """Whether ``given`` is that proof (compared in constant time)."""
    expected = mac(secret, role, dialer, holder, dialer_nonce, holder_nonce)
    return hmac.compare_digest(given.encode(), expected.encode())
