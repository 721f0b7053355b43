"""The ``reach`` command: ``reach serve`` runs a coordinator, ``reach demo`` shows one at work."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import gc
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from reach.cli_inputs import PEER_TOKEN_ENV, admin_token, peering, rules
from reach.config import Settings
from reach.core.routing import STRATEGIES


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reach",
        description="Agent-Reach: agents find each other, call each other's capabilities, "
                    "and keep working through timeouts, crashes and overload.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run a standalone coordinator until Ctrl-C",
                           description="Run a coordinator. Agents connect with "
                                       "Agent(...).connect(URL), callers with Client.connect(URL).")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any free)")
    serve.add_argument("--http-port", type=int, default=None, metavar="PORT",
                       help="the REST front door's port (default 8766 beside the default "
                            "--port, any free one beside another; 0 = any free); see "
                            "docs/http-api.md")
    serve.add_argument("--no-http", action="store_true",
                       help="no REST front door: websocket callers only")
    serve.add_argument("--mcp", action="store_true",
                       help="serve MCP at /mcp on the REST port (docs/mcp.md; needs "
                            "agent-reach[mcp])")
    serve.add_argument("--intent-model", action="store_true",
                       help="route intents with a bundled multilingual model fused with the "
                            "words (docs/intent.md; needs agent-reach[intent])")
    serve.add_argument("--a2a", action="store_true",
                       help="serve A2A at /a2a on the REST port (docs/a2a.md; needs "
                            "agent-reach[a2a])")
    serve.add_argument("--notify-allow", action="append", default=[], metavar="CIDR",
                       help="a private network completion webhooks (notify=) and A2A pushes "
                            "may reach, e.g. 10.0.0.0/8 (repeatable; docs/webhooks.md); "
                            "their signing secret: REACH_NOTIFY_SECRET, else one kept in the "
                            "store")
    serve.add_argument("--store", default="sqlite:///reach.db",
                       help="database URL: sqlite:///file.db (default reach.db; one "
                            "coordinator per file), sqlite:// (in memory, gone at exit) or "
                            "postgresql://USER@HOST/DB (pip install 'agent-reach[postgres]'; "
                            "docs/cluster.md)")
    serve.add_argument("--cluster", action="store_true",
                       help="join the other coordinators on the same --store postgresql://... "
                            "as one Reach: agents and tasks are shared, a dead node's tasks "
                            "are taken over (docs/cluster.md)")
    serve.add_argument("--lease", type=float, default=5.0, metavar="S",
                       help="with --cluster: seconds a node's lease lasts; that long after a "
                            "node dies the others take its tasks over (default 5)")
    serve.add_argument("--heartbeat-interval", type=float, default=10.0, metavar="S",
                       help="seconds between agent heartbeats (default 10)")
    serve.add_argument("--suspect-after", type=float, default=2.0, metavar="N",
                       help="missed beats before an agent is suspected (default 2)")
    serve.add_argument("--offline-after", type=float, default=3.0, metavar="N",
                       help="missed beats before an agent is offline (default 3)")
    serve.add_argument("--ack-timeout", type=float, default=5.0, metavar="S",
                       help="seconds an agent has to acknowledge a delivery (default 5)")
    serve.add_argument("--queue-wait", type=float, default=0.2, metavar="S",
                       help="how long a synchronous call waits for a free slot before "
                            "'rejected' (default 0.2)")
    serve.add_argument("--max-wait", type=float, default=3600.0, metavar="S",
                       help="how long a submitted task without a timeout waits its turn for a "
                            "free slot or an agent before it is dead-lettered (default 3600)")
    serve.add_argument("--max-backlog", type=int, default=10_000, metavar="N",
                       help="tasks of one capability waiting their turn before new submits "
                            "are refused with 'rejected' (default 10000)")
    serve.add_argument("--max-backlog-age", type=float, default=None, metavar="S",
                       help="also refuse new submits of a capability once its longest "
                            "waiting task has waited this long (default: no bound)")
    serve.add_argument("--max-retries", type=int, default=2, metavar="N",
                       help="default retries per task (default 2)")
    serve.add_argument("--strategy", choices=STRATEGIES, default="weighted",
                       help="how to pick among healthy agents (default weighted)")
    serve.add_argument("--recovery-grace", type=float, default=10.0, metavar="S",
                       help="after a restart, how long resumed tasks wait for their agents to "
                            "reconnect before failing over (default 10)")
    serve.add_argument("--retry-budget", type=float, default=0.2, metavar="SHARE",
                       help="retries may add at most this share on top of first attempts "
                            "(default 0.2): a mass failure does not become a retry storm")
    serve.add_argument("--auto-replay", action="store_true",
                       help="replay a capability's dead letters when it gets a healthy agent "
                            "again (each letter once)")
    serve.add_argument("--admin-token", default=None,
                       help="token the admin feed and reach-dash need (default: a random one, "
                            "printed at start); on the command line every user of the host "
                            "can read it (/proc/<pid>/cmdline): prefer --admin-token-file")
    serve.add_argument("--admin-token-file", type=Path, default=None, metavar="FILE",
                       help="read the admin token from FILE (one trailing newline dropped), "
                            "so it is not in the command line or the environment")
    serve.add_argument("--tokens-file", type=Path, default=None, metavar="FILE",
                       help="JSON object token -> principal; without it the coordinator runs "
                            "in open mode (no authentication, loopback only)")
    serve.add_argument("--permissions-file", type=Path, default=None, metavar="FILE",
                       help="JSON object caller -> capability patterns it may call "
                            "(globs like 'sales.*', or 'scope:read')")
    serve.add_argument("--serves-file", type=Path, default=None, metavar="FILE",
                       help="JSON object agent -> capability patterns it may serve; with it, "
                            "only the agents it lists may register (docs/security.md)")
    serve.add_argument("--insecure", action="store_true",
                       help="allow binding beyond loopback without tokens (a trusted network "
                            "only)")
    serve.add_argument("--max-connections", type=int, default=10_000, metavar="N",
                       help="open connections at most, of every kind (default 10000)")
    serve.add_argument("--max-caller-tasks", type=int, default=10_000, metavar="N",
                       help="unfinished tasks one caller may have at once (default 10000)")
    serve.add_argument("--metrics-public", action="store_true",
                       help="answer GET /metrics from any peer, not only loopback")
    serve.add_argument("--json-logs", action="store_true",
                       help="one JSON line per task transition and admin action (logger "
                            "reach.events)")
    serve.add_argument("--audit-log", default=None, metavar="FILE",
                       help="append one JSON line per call decision, task end and admin "
                            "action to FILE ('-': the reach.audit logger only); no params "
                            "unless --audit-params (docs/security.md)")
    serve.add_argument("--audit-params", action="store_true",
                       help="also record each call's params and intent text in the audit log")
    serve.add_argument("--agents", type=Path, default=None, metavar="FILE",
                       help="a TOML file of agents that don't speak Reach (HTTP services, "
                            "command-line tools, NATS workers) for the coordinator to attach "
                            "and drive; see docs/adapters.md")
    serve.add_argument("--alerts", type=Path, default=None, metavar="FILE",
                       help="a TOML file of alert rules and the webhooks they page (dead "
                            "letters, open breakers, slow capabilities, capabilities without "
                            "an agent); see docs/alerts.md")
    serve.add_argument("--otel-endpoint", metavar="URL",
                       default=os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None,
                       help="export a span per task and per attempt to this OTLP/HTTP "
                            "receiver, like http://127.0.0.1:4318 (default: "
                            "$OTEL_EXPORTER_OTLP_ENDPOINT; service name $OTEL_SERVICE_NAME or "
                            "reach); pip install 'agent-reach[otel]'; see docs/otel.md")
    serve.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    peers = serve.add_argument_group(
        "peer links", "Several coordinators behave as one Reach: each mirrors the agents the "
        "others hold and routes calls to them (docs/protocol.md §14).")
    peers.add_argument("--node-id", default=None, metavar="ID",
                       help="this coordinator's name among its peers (default: a random "
                            "n-xxxxxx, printed at start); unique per coordinator")
    peers.add_argument("--peer-token-file", type=Path, default=None, metavar="FILE",
                       help="a file holding the peer secret (its first line): peers prove "
                            "they know it and never send it; set the same one on every node. "
                            f"Without it: --peer-token, else the environment variable "
                            f"{PEER_TOKEN_ENV}, else the admin token (so without one of them "
                            "set the same everywhere no two nodes can link)")
    peers.add_argument("--peer-token", default=None, metavar="TOKEN",
                       help="the peer secret on the command line: every local user sees it "
                            f"in ps, so prefer --peer-token-file or {PEER_TOKEN_ENV}")
    peers.add_argument("--peer", action="append", default=[], metavar="URL", dest="peers",
                       help="another coordinator's websocket URL (ws://HOST:PORT) to link to "
                            "at start and redial while it is down; repeat for each peer. A "
                            "list naming this node itself is fine (that entry is skipped)")

    demo = sub.add_parser("demo", help="a coordinator, three agents and a mix of calls, live",
                          description="Starts a coordinator on an embedded SQLite file, three "
                                      "agents from the field and a caller; shows agents and task "
                                      "outcomes live, then exits by itself.")
    demo.add_argument("--seconds", type=float, default=10.0,
                      help="how long to send work (default 10; the demo exits soon after)")
    demo.add_argument("--plain", action="store_true",
                      help="print a final summary only (no live table)")
    mcp = sub.add_parser("mcp", help="a stdio MCP server relaying to a coordinator's /mcp",
                         description="For MCP hosts that spawn servers as commands (docs/mcp.md).")
    mcp.add_argument("--url", required=True,
                     help="the coordinator: ws://HOST:PORT (its MCP door is asked for), or "
                          "its MCP URL, http://HOST:HTTP_PORT/mcp")
    mcp.add_argument("--token", default=os.environ.get("REACH_TOKEN"),
                     help="the caller's token (default: $REACH_TOKEN)")
    from reach.cli_admin import register  # agents, dead-letters, replay, ... (docs: README)
    register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "run", None) is not None:  # an operator's command (reach.cli_admin)
        from reach.cli_admin import run
        return run(args)
    if args.command == "mcp":
        from reach.server.mcp_stdio import run as relay  # the mcp extra, only when asked for
        asyncio.run(relay(args.url, args.token))
        return 0
    if args.command == "serve":
        logging.basicConfig(level=args.log_level.upper(),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if args.json_logs:  # bare JSON lines on stdout, for a log shipper to read as they are
            handler = logging.StreamHandler(sys.stdout)
            handler.setFormatter(logging.Formatter("%(message)s"))
            events = logging.getLogger("reach.events")
            events.addHandler(handler)
            events.setLevel(logging.INFO)
            events.propagate = False
        try:
            settings = _settings(args)
            if args.alerts is not None:  # validated now: a bad rule is one line, rc 2
                from reach.alert_rules import load_alerts
                settings = replace(settings, alerts=load_alerts(args.alerts))
            adapters = _agents(args.agents)
        except ValueError as exc:
            print(f"reach: {exc}", file=sys.stderr)
            return 2
        try:
            _free(settings)
            asyncio.run(_serve(settings, adapters))
        except KeyboardInterrupt:
            pass
        except StartFailed as exc:  # a taken port, an agent that cannot attach: one line
            print(f"reach: {exc}", file=sys.stderr)
            return 2
        return 0
    from reach.demo import run_demo
    return asyncio.run(run_demo(seconds=args.seconds, live=not args.plain))


def _settings(args: argparse.Namespace) -> Settings:
    http_port = args.http_port
    if http_port is None:  # 8766 beside the default port; beside a chosen one, any free one
        http_port = 8766 if args.port == 8765 else 0
    return Settings(
            host=args.host, port=args.port, store=args.store,
            http_port=None if args.no_http else http_port,
            heartbeat_interval=args.heartbeat_interval, suspect_after=args.suspect_after,
            offline_after=args.offline_after, ack_timeout=args.ack_timeout,
            queue_wait=args.queue_wait, max_wait=args.max_wait, max_backlog=args.max_backlog,
            max_backlog_age=args.max_backlog_age,
            max_retries=args.max_retries, strategy=args.strategy,
            recovery_grace=args.recovery_grace, admin_token=admin_token(args),
            retry_budget=args.retry_budget, auto_replay=args.auto_replay,
            metrics_public=args.metrics_public, json_logs=args.json_logs,
            tokens=rules(args.tokens_file, str), permissions=rules(args.permissions_file, list),
            serves=rules(args.serves_file, list), insecure=args.insecure, mcp=args.mcp,
            intent_model=args.intent_model,
            a2a=args.a2a, notify_allow=tuple(args.notify_allow),
            notify_secret=os.environ.get("REACH_NOTIFY_SECRET") or None,
            max_connections=args.max_connections, max_caller_tasks=args.max_caller_tasks,
            audit_log=args.audit_log, audit_params=args.audit_params,
            otel_endpoint=args.otel_endpoint,
            otel_service_name=os.environ.get("OTEL_SERVICE_NAME") or "reach",
            cluster=args.cluster, lease_s=args.lease, **peering(args))


def _agents(path: Path | None) -> list[Any]:
    """The adapter agents of ``--agents FILE``, built (and so validated) before the start."""
    if path is None:
        return []
    from reach.adapters.config import load_agents
    return list(load_agents(path))


class StartFailed(Exception):
    """``reach serve`` could not start; the message says why (printed as one line)."""


def _free(settings: Settings) -> None:
    """Refuse a taken port before anything is created (the store's file among them), with
    what to do instead; the bind in ``Reach.start`` still decides if another process races."""
    ports = [(settings.port, "--port")]
    if settings.http_port:
        ports.append((settings.http_port, "--http-port"))
    for port, flag in ports:
        if not port:
            continue
        with socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((settings.host, port))
            except OSError as exc:
                raise StartFailed(_bind_failed(settings.host, port, flag, exc)) from None


def _bind_failed(host: str, port: int, flag: str, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (f"port {port} on {host} is taken (another `reach serve`?): stop that process, "
                f"or pick another port with {flag} PORT ({flag} 0 picks a free one)")
    return f"cannot listen on {host}:{port} ({exc.strerror or exc}): check --host and {flag}"


def _say(text: str) -> None:
    """Print a status line; a closed stdout (``reach serve | tee log`` when Ctrl-C ends the
    tee first) must not stop the coordinator from draining, so further output is dropped."""
    try:
        print(text, flush=True)
    except (BrokenPipeError, ValueError):  # ValueError: stdout already closed
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


def tune_gc() -> None:
    """For a coordinator process: a full collection over tens of thousands of live tasks
    pauses the loop for 50–200 ms (measured), long enough to look like a timeout. Collect
    young objects less often and leave the start-up heap out of later collections."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


async def _serve(settings: Settings, adapters: Sequence[Any] = ()) -> None:
    from reach.reach import Reach

    try:
        reach = await Reach.start(settings)
    except OSError as exc:  # the port was taken since _free looked, or the address is not ours
        raise StartFailed(f"cannot start the coordinator: {exc}") from None
    except ImportError as exc:  # --otel-endpoint without the extra: the message names it
        raise StartFailed(str(exc)) from None
    try:
        for adapter in adapters:
            view = await reach.attach(adapter)
            _say(f"reach: attached {view['kind']} agent {view['name']} ({view['state']}): "
                 f"{', '.join(view['capabilities'])}")
    except BaseException as exc:
        await reach.stop()
        if isinstance(exc, ValueError):  # attach's refusal (its message names the agent)
            raise StartFailed(str(exc)) from None
        raise
    tune_gc()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    _say(f"reach: coordinator listening on {reach.url} (store {settings.store})")
    if settings.peers or settings.node_id:
        _say(f"reach: node {reach.node.node_id}; peers: "
             f"{', '.join(settings.peers) or 'none yet'}")
    if reach.http_url is not None:
        _say(f"reach: REST front door at {reach.http_url} (OpenAPI at "
             f"{reach.http_url}/openapi.json; docs/http-api.md)")
    if reach.mcp_url is not None:
        _say(f"reach: MCP (Streamable HTTP) at {reach.mcp_url} (docs/mcp.md)")
    if reach.a2a_url is not None:
        _say(f"reach: A2A at {reach.a2a_url} (card at {reach.a2a_url}/.well-known/"
             f"agent-card.json; docs/a2a.md)")
    http = reach.url.replace("ws://", "http://", 1)
    _say(f"reach: metrics at {http}/metrics; dashboard: "
         f"reach-dash --url {reach.url} --token {reach.admin_token}")
    for warning in reach.trust_warnings():
        _say(f"reach: WARNING: {warning}")
    try:
        await stop.wait()
    finally:
        await _stop(reach)


async def _stop(reach: Any) -> None:
    """Ctrl-C (or SIGTERM): say how many tasks are still in flight and how long the drain
    may take, drain them, and say when the coordinator is gone (stdout, like the start lines),
    so an operator is never left waiting on a silent terminal."""
    n = reach.in_flight
    _say(f"reach: stopping: draining {n} task{'' if n == 1 else 's'}…"
         + (f" (up to {reach.settings.drain_timeout:g} s)" if n else ""))
    await reach.stop()
    _say("reach: stopped")


if __name__ == "__main__":
    sys.exit(main())
