"""What ``reach serve`` reads besides its flags' values: secrets (the admin token and the peer
secret, from a file or the environment rather than argv, where ``ps`` shows them), the rules
files (tokens, call and serve rules) and the peer-link settings, each checked before the start
so that a mistake is one line, not a coordinator that runs wrong."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

PEER_TOKEN_ENV = "REACH_PEER_TOKEN"  # the peer secret from the environment (not seen in ps)


def peering(args: argparse.Namespace) -> dict[str, Any]:
    """The peer-link settings of ``--node-id``, the peer secret and ``--peer``, checked
    here so that a typo is one line at start, not a link that redials in vain forever."""
    node = args.node_id
    if node is not None and (not node.strip() or len(node) > 200 or
                             any(c.isspace() or not c.isprintable() for c in node)):
        raise ValueError(f"--node-id {node!r}: give a short name without spaces or control "
                         f"characters (at most 200), unique to this coordinator")
    token = peer_token(args, os.environ)
    urls = []
    for url in args.peers:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme not in ("ws", "wss") or not parts.hostname or port is None:
            raise ValueError(f"--peer {url!r}: give another coordinator's websocket URL with "
                             f"its port, like ws://10.0.0.2:8765 (wss:// across machines)")
        urls.append(url)
    if urls and token is None and args.admin_token is None:
        raise ValueError(f"--peer needs --peer-token-file (or {PEER_TOKEN_ENV}, or the same "
                         f"--admin-token on every node): with the default random token no "
                         f"peer could link")
    return {"node_id": node, "peer_token": token, "peers": tuple(urls)}


def peer_token(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The peer secret: ``--peer-token-file``, else ``--peer-token``, else ``REACH_PEER_TOKEN``
    (None: the admin token serves). A file or the environment keeps it out of ``ps``; giving
    both flags is a mistake said at once, as is an empty or unreadable secret."""
    path, flag = args.peer_token_file, args.peer_token
    if path is not None and flag is not None:
        raise ValueError("give the peer secret once: --peer-token-file or --peer-token")
    if path is not None:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--peer-token-file {str(path)!r}: cannot read it "
                             f"({type(exc).__name__})") from None
        token, where = (lines[0].strip() if lines else ""), f"--peer-token-file {str(path)!r}"
    elif flag is not None:
        token, where = flag, "--peer-token"
    elif PEER_TOKEN_ENV in env:
        token, where = env[PEER_TOKEN_ENV].strip(), PEER_TOKEN_ENV
    else:
        return None
    if not token.strip():
        raise ValueError(f"{where} must not be empty: peers link only with a secret")
    return token


def admin_token(args: argparse.Namespace) -> str | None:
    """``--admin-token``, or the text of ``--admin-token-file`` (not both)."""
    path: Path | None = args.admin_token_file
    if path is None:
        return args.admin_token  # type: ignore[no-any-return]
    if args.admin_token is not None:
        raise ValueError("give --admin-token or --admin-token-file, not both")
    from reach.envvars import read_secret
    token = read_secret(str(path), "--admin-token-file", ValueError)
    if not token.strip():
        raise ValueError(f"--admin-token-file {path} is empty")
    args.admin_token = token  # (--peer checks whether an admin token was given)
    return token


def rules(path: Path | None, kind: type) -> Any:
    """A rules file: a JSON object whose values are strings (tokens) or lists of patterns."""
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"reach: cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, kind) for k, v in data.items()):
        raise SystemExit(f"reach: {path} must be a JSON object of name -> "
                         f"{'principal' if kind is str else 'list of patterns'}")
    return data if kind is str else {k: tuple(map(str, v)) for k, v in data.items()}
