"""What every operator command shares: the coordinator's URL and tokens from flags or the
environment, the admin connection, usage errors, exit statuses by error code, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from reach.errors import ReachError

DEFAULT_URL = "ws://127.0.0.1:8765"
URL_ENV, ADMIN_TOKEN_ENV, CALLER_TOKEN_ENV = "REACH_URL", "REACH_ADMIN_TOKEN", "REACH_TOKEN"

EXIT_CODES: dict[str, int] = {
    "unauthorized": 3,
    "invalid_params": 4,
    "no_route": 5,
    "unavailable": 6,
    "rejected": 7,
    "timeout": 8,
    "task_failed": 9,
    "protocol_error": 10,
    "cancelled": 11,
    "usage": 2,  # a command line this module refuses, as argparse's own
}
"""The exit status of a refusal, by its error code (any other code: 1)."""


def failed(code: str, message: str) -> int:
    """Say a refusal on stderr; the exit status of its code."""
    print(f"reach: {code}: {message}", file=sys.stderr)
    return EXIT_CODES.get(code, 1)


def token_of(args: argparse.Namespace) -> str | None:
    """The token from --token-file, --token or the command's environment variable."""
    if args.token_file is not None:
        if args.token is not None:
            raise usage("give --token or --token-file, not both")
        from reach.envvars import read_secret
        token = read_secret(str(args.token_file), "--token-file", Usage)
        if not token.strip():
            raise usage(f"--token-file {args.token_file} is empty")
        return token
    if args.token is not None:
        return str(args.token)
    return os.environ.get(args.token_env) or None


class Usage(ReachError):
    """A command line refused after parsing (say, a bad --params): exit status 2."""

    code = "usage"


def usage(message: str) -> ReachError:
    return Usage(message)


def admin_of(args: argparse.Namespace) -> Any:
    """An admin-feed connection (``reach.Admin``) to the coordinator the flags name."""
    from reach.admin import Admin
    token = token_of(args)
    if token is None:
        raise usage(f"an admin token is needed: --token-file FILE, ${ADMIN_TOKEN_ENV} or "
                     f"--token TOKEN (`reach serve` prints it at start)")
    return Admin.connect(args.url, token=token)


def json_arg(text: str, flag: str) -> dict[str, Any]:
    """A JSON object given on the command line (``-``: read from stdin)."""
    if text == "-":
        text = sys.stdin.read()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise usage(f"{flag} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise usage(f"{flag} must be a JSON object, like '{{\"n\": 1}}'")
    return value


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))
