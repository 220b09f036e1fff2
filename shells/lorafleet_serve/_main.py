"""``lorafleet serve``: the reference router on the command line."""

from __future__ import annotations

import argparse
import gc
import importlib.util
import logging
import math
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from lorafleet import FLEET_DEFAULTS

from ._catalog import adapter_problems
from ._config import Config, ConfigError, build, discover_flag, pair_flag, read_toml, replica_flag, resolve
from ._server import ListenError, RouterServer
from ._sizing import sizing

PROG = "lorafleet serve"
DESCRIPTION = """\
An OpenAI-compatible router in front of vLLM replicas: each completion goes to a replica that holds
the adapter its "model" names, loaded there first if need be. Settings come from a TOML file
(--config) and flags; a flag replaces the file's value of the same setting (a repeated flag, the
file's whole list). Keys are read from environment variables the settings name, never from a flag.
"""
log = logging.getLogger("lorafleet.serve")

EXAMPLE = """\
example:
  export VLLM_KEY=...            # the replicas' --api-key, if they have one
  lorafleet serve --replica id=gpu-0,url=http://10.0.0.5:8000,model=llama,limit=4,api_key_env=VLLM_KEY \\
                  --adapters-root /srv/adapters --port 8000

The same as a file (lorafleet serve --config router.toml):
  [server]
  host = "127.0.0.1"
  port = 8000
  # api_key_env = "ROUTER_KEY"   # clients must then send Authorization: Bearer $ROUTER_KEY
  # metrics_api_key_env = "METRICS_KEY"   # and GET /metrics this key

  [admin]                        # the operator's interface, on a port of its own (docs/admin.md)
  port = 8001                    # on 127.0.0.1 unless host = "..." says otherwise
  api_key_env = "ADMIN_KEY"      # it always wants a key of its own

  [[replicas]]
  id = "gpu-0"
  url = "http://10.0.0.5:8000"
  model = "llama"
  limit = 4
  api_key_env = "VLLM_KEY"
  max_cpu_loras = 6              # vLLM's --max-cpu-loras, checked against what the router can put there

  [[discover]]                   # and every address a DNS name resolves to, followed as it changes
  dns = "vllm.default.svc.cluster.local"   # a headless Service; srv = true for its SRV records
  port = 8000
  model = "llama"
  limit = 4

  [adapters]
  root = "/srv/adapters"         # or a table: [adapters.paths] sql = "/srv/adapters/sql"
  # refresh = 10                 # seconds between looks for new files in the adapters' folders

  [pins]
  sql = 2                        # keep "sql" loaded on two replicas

  [fleet]
  prewarm = ["chat"]             # loaded before the router takes requests
  # attempts = 3, headroom = 2, routers = 1 (the routers sharing these replicas),
  # concurrency = 256 (vLLM's --max-num-seqs)

  [timeouts]                     # seconds: load, listing, listing_interval, shared_interval, connect,
                                 # read, shutdown
  load = 120
"""


def _whole(least: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, not {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


class _NoKeyHere(argparse.Action):
    """``--api-key``: refused without echoing its value, which would then sit in a log or a terminal."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        parser.error(
            "a key is never given on the command line: put it in an environment variable and name "
            "the variable with --api-key-env, --metrics-api-key-env, --admin-api-key-env (or api_key_env= "
            "in --replica)"
        )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # Abbreviations off: "--api-key sk-..." must not pass for --api-key-env and put a key in a message.
        allow_abbrev=False,
    )
    add = p.add_argument
    add("--config", metavar="FILE", type=Path, help="a TOML file of settings (see the example below)")
    add(
        "--replica",
        metavar="SPEC",
        action="append",
        help="a vLLM replica: id=ID,url=URL,model=MODEL,limit=N[,api_key_env=VAR][,max_cpu_loras=N] "
        "(repeat for each)",
    )
    add(
        "--discover",
        metavar="SPEC",
        action="append",
        help="replicas by a DNS name, followed as it changes: dns=NAME,port=PORT,model=MODEL,limit=N"
        "[,srv=true][,api_key_env=VAR][,interval=5][,resolver=HOST:PORT][,max_cpu_loras=N] (repeatable)",
    )
    add("--adapters-root", metavar="DIR", type=Path, help="serve every adapter folder under DIR, by its name")
    add("--adapter", metavar="NAME=FOLDER", action="append", help="serve one adapter (repeatable)")
    add(
        "--adapter-model", metavar="MODEL", help="the base model of the adapters, when replicas serve several"
    )
    add(
        "--adapter-refresh",
        metavar="S",
        type=_seconds,
        help="seconds between looks for new files in the adapters' folders (default 10)",
    )
    add("--pin", metavar="NAME=COPIES", action="append", help="keep an adapter loaded on COPIES replicas")
    add("--prewarm", metavar="NAME", action="append", help="load an adapter before taking requests")
    add("--host", help="address to listen on (default 127.0.0.1)")
    add("--port", type=_whole(0), help="port to listen on (default 8000; 0 for a free one)")
    add("--api-key-env", metavar="VAR", help="environment variable holding the key clients must send")
    for secret in ("--api-key", "--metrics-api-key", "--admin-api-key"):
        add(secret, nargs="?", action=_NoKeyHere, help=argparse.SUPPRESS)
    add(
        "--metrics-api-key-env",
        metavar="VAR",
        help="environment variable holding the key GET /metrics wants (default: it wants none)",
    )
    add("--admin-port", type=_whole(0), help="the admin interface's own port (default: no admin interface)")
    add("--admin-host", help="address the admin interface listens on (default 127.0.0.1)")
    add("--admin-api-key-env", metavar="VAR", help="environment variable holding the admin interface's key")
    add("--max-body-bytes", metavar="N", type=_whole(1), help="largest request body taken (default 4 MiB)")
    add("--max-connections", metavar="N", type=_whole(1), help="connections to each replica at once (1000)")
    add(
        "--metrics-adapters",
        metavar="N",
        type=_whole(0),
        help="adapters with their own label in /metrics, the most requested; the rest summed (default 20)",
    )
    add(
        "--request-log",
        metavar="FILE",
        type=Path,
        help="append a JSON line per completion to FILE, for lorafleet simulate --trace (default: none)",
    )
    add(
        "--request-log-max-bytes",
        metavar="N",
        type=_whole(1),
        help="the request log's size at which it becomes FILE.1 and a new one begins (default 100 MiB)",
    )
    add(
        "--tracing",
        action="store_true",
        default=None,
        help="a span per request, sent by OTLP where OTEL_EXPORTER_OTLP_ENDPOINT says (lorafleet[otel])",
    )
    add("--attempts", metavar="N", type=_whole(1), help="replicas one request may try (default 3)")
    add("--headroom", metavar="N", type=_whole(0), help="adapters over its limit a busy replica may take")
    add("--routers", metavar="N", type=_whole(1), help="routers sharing these replicas (default 1)")
    add(
        "--peer",
        metavar="URL",
        action="append",
        help="a router sharing these replicas, this one included (repeat for each): the ready one up "
        "the longest decides, the others relay to it",
    )
    add(
        "--peers-dns",
        metavar="NAME[:PORT]",
        help="a name whose addresses are the routers sharing these replicas (a headless Service)",
    )
    add(
        "--concurrency",
        metavar="N",
        type=_whole(1),
        help="requests one replica runs at once (vLLM's --max-num-seqs): past it, a second copy",
    )
    for name, default in (
        ("load", 120),
        ("listing", 5),
        ("connect", 5),
        ("read", 600),
        ("shutdown", 10),
    ):
        add(f"--{name}-timeout", metavar="S", type=_seconds, help=f"seconds (default {default})")
    add("--listing-interval", metavar="S", type=_seconds, help="seconds between listings (default 30)")
    add(
        "--shared-interval",
        metavar="S",
        type=_seconds,
        help=(
            "seconds between listings of a replica another router works on "
            f"(default {FLEET_DEFAULTS['shared_interval']:g})"
        ),
    )
    add(
        "--runtime",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="the event loop to run on (default asyncio)",
    )
    add("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], default="INFO", help="(default INFO)")
    add("--check", action="store_true", help="check the settings and the keys' variables, then exit")
    return p


def config_of(args: argparse.Namespace) -> Config:
    """The ``Config`` the file and the flags make together.

    Raises:
        ConfigError: a setting is wrong.
    """
    settings: dict[str, Any] = read_toml(args.config) if args.config is not None else {}
    if args.replica:
        settings["replicas"] = tuple(replica_flag(spec) for spec in args.replica)
    if args.discover:
        settings["discover"] = tuple(discover_flag(spec) for spec in args.discover)
    if args.adapters_root is not None:
        settings["adapter_root"] = args.adapters_root
    if args.adapter:
        pairs = (pair_flag("--adapter", text) for text in args.adapter)
        settings["adapter_paths"] = {name: os.path.abspath(folder) for name, folder in pairs}
        settings["adapter_models"] = {}
    if args.pin:
        pins = {}
        for text in args.pin:
            name, copies = pair_flag("--pin", text)
            try:
                pins[name] = int(copies)
            except ValueError:
                raise ConfigError(f"--pin {text!r}: COPIES must be a whole number") from None
        settings["pins"] = pins
    if args.prewarm:
        settings["prewarm"] = tuple(args.prewarm)
    if args.peer:
        settings["peers"] = tuple(args.peer)
    if args.peers_dns is not None:
        name, colon, port = args.peers_dns.rpartition(":")
        if colon and port.isdigit() and name:
            settings["peers_dns"], settings["peers_port"] = name, int(port)
        else:
            settings["peers_dns"] = args.peers_dns
    for flag, key in (
        ("adapter_model", "adapter_model"),
        ("host", "host"),
        ("port", "port"),
        ("api_key_env", "api_key_env"),
        ("metrics_api_key_env", "metrics_api_key_env"),
        ("admin_port", "admin_port"),
        ("admin_host", "admin_host"),
        ("admin_api_key_env", "admin_api_key_env"),
        ("max_body_bytes", "max_body_bytes"),
        ("max_connections", "max_connections"),
        ("metrics_adapters", "metrics_adapters"),
        ("request_log", "request_log"),
        ("request_log_max_bytes", "request_log_max_bytes"),
        ("tracing", "tracing"),
        ("attempts", "attempts"),
        ("headroom", "headroom"),
        ("routers", "routers"),
        ("concurrency", "concurrency"),
        ("load_timeout", "load_timeout"),
        ("listing_timeout", "listing_timeout"),
        ("listing_interval", "listing_interval"),
        ("shared_interval", "shared_interval"),
        ("adapter_refresh", "adapter_refresh"),
        ("connect_timeout", "connect_timeout"),
        ("read_timeout", "read_timeout"),
        ("shutdown_timeout", "shutdown_timeout"),
    ):
        value = getattr(args, flag)
        if value is not None:
            settings[key] = value
    return build(settings)


GC_YOUNG = 7000
"""The collector's first threshold in ``serve`` (CPython's default: 700)."""


def _settle_collector() -> tuple[int, int]:
    """Set the garbage collector for serving (bench/NOTES.md, issue 38); returns the objects frozen and
    the first threshold."""
    # What start-up made lives as long as the process: out of the collector's full passes, which
    # otherwise stall every open stream for tens of ms a pass.
    gc.collect()
    gc.freeze()
    # Requests in flight keep their objects young: at 700 (CPython's default) the collector ran 2.6
    # times as often a request at 128 connections as at 8, each pass walking 2.7 times as much, about
    # a tenth of the router's CPU. Most of a request's objects are freed by their count before 7,000.
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    return gc.get_freeze_count(), gc.get_threshold()[0]


def main(argv: list[str]) -> int:
    """Run ``lorafleet serve`` with the flags after ``serve``; returns the exit status."""
    args = parser().parse_args(argv)
    try:
        config = config_of(args)
        resolve(config)  # every key's variable is set, or say so now rather than at the first request
    except ConfigError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    if args.check:
        sized = sizing(config)
        sys.stdout.write("".join(f"{line}\n" for line in (summary(config), *sized.lines)))
        warnings = [*sized.warnings, *adapter_problems(config)]
        sys.stderr.write("".join(f"{PROG}: warning: {line}\n" for line in warnings))
        return 0
    if args.runtime == "trio" and importlib.util.find_spec("trio") is None:
        sys.stderr.write(f"{PROG} --runtime trio needs trio: pip install 'lorafleet[serve,trio]'\n")
        return 2
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    # A line per request at INFO: what the format above does not show, logging need not look up (the
    # calling frame, thread and process), as the logging HOWTO's "Optimization" advises.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    if args.log_level != "DEBUG":
        # httpx logs every request it makes at INFO: the router's own line per request says more.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        anyio.run(
            _serve,
            config,
            lambda: config_of(args),
            args.config,
            backend=args.runtime,
            backend_options=_backend_options(args.runtime),
        )
    except ListenError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 1
    return 0


def _backend_options(runtime: str) -> dict[str, Any]:
    """uvloop for asyncio where it is installed (the ``serve`` extra has it where it builds): its loop
    spends less CPU per request than asyncio's own (bench/NOTES.md)."""
    if runtime == "asyncio" and importlib.util.find_spec("uvloop") is not None:
        return {"use_uvloop": True}
    return {}


def summary(config: Config) -> str:
    """One line on what ``config`` serves, for ``--check`` and the start-up log."""
    models = config.models
    replicas = ", ".join(f"{len(rs)} of {model!r}" for model, rs in models.items()) or "none listed"
    found = "".join(
        f"; discovered by {'SRV' if d.srv else 'address'}: {d.dns!r}"
        f"{f' port {d.port}' if d.port is not None and not d.srv else ''} of {d.model!r}"
        for d in config.discover
    )
    sources = []
    if config.adapter_paths:
        sources.append(f"{len(config.adapter_paths)} named")
    if config.adapter_root is not None:
        sources.append(f"those under {str(config.adapter_root)!r}")
    extras = []
    if config.pins:
        extras.append(f"{len(config.pins)} pinned")
    if config.prewarm:
        extras.append(f"{len(config.prewarm)} to prewarm")
    key = f", clients' key from ${config.api_key_env}" if config.api_key_env else ", no key for clients"
    if config.metrics_api_key_env:
        key += f", /metrics' key from ${config.metrics_api_key_env}"
    admin = ""
    if config.admin_port is not None:
        where = f"{config.admin_host}:{config.admin_port}"
        admin = f"; admin interface on {where}, key from ${config.admin_api_key_env}"
    peers = []
    if config.peers:
        peers.append(f"{len(config.peers)} listed")
    if config.peers_dns is not None:
        peers.append(f"those {config.peers_dns!r} resolves to, port {config.peers_port}")
    told = f"; peers: {' and '.join(peers)}, the one up the longest deciding" if peers else ""
    return (
        f"replicas: {replicas}{found}; adapters: {' and '.join(sources)}"
        f"{' (' + ', '.join(extras) + ')' if extras else ''}; listening on {config.host}:{config.port}{key}"
        f"{admin}{told}"
    )


async def _serve(config: Config, source: Callable[[], Config], watch: Path | None) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with RouterServer(config, source=source, watch=watch) as server:
            log.info("lorafleet serve: %s", summary(config))
            for problem in adapter_problems(config):
                log.warning("lorafleet serve: %s", problem)
            frozen, young = _settle_collector()
            log.debug(
                "lorafleet serve: %d objects of start-up kept out of garbage collection; it runs every %d",
                frozen,
                young,
            )
            log.info(
                "lorafleet serve: ready on %s (Ctrl-C stops it; SIGHUP reads the settings again)", server.url
            )
            async for signum in signals:
                if signum == signal.SIGHUP:
                    log.info("lorafleet serve: SIGHUP: reading the settings again, resolving every name")
                    await server.reload()
                    continue
                log.info(
                    "lorafleet serve: %s: stopping; running requests get %g s",
                    signal.Signals(signum).name,
                    config.shutdown_timeout,
                )
                break
