"""Run the router: a fleet, a client for forwarding, and hypercorn, in the current event loop."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc
import httpx
import sniffio
from hypercorn.config import Config as HypercornConfig
from prometheus_client import CollectorRegistry

from lorafleet_fleet import KEEPALIVE_EXPIRY, Fleet, PrometheusMetrics

from ._app import NoCookies, Router
from ._catalog import Catalog
from ._config import Config, check, resolve

log = logging.getLogger("lorafleet.serve")


class ListenError(Exception):
    """The router cannot listen where it was told to (the address is taken, or not this host's)."""


class RouterServer:
    """The reference router, served by hypercorn on ``config.host``:``config.port``, until the block ends.

    Use it as ``async with RouterServer(config) as server``, under asyncio or trio: entering opens
    the fleet (reading the replicas' listings), loads ``config.prewarm`` and starts listening; leaving
    stops taking connections, gives running requests ``config.shutdown_timeout`` seconds, then
    closes the fleet. Port 0 takes a free port; ``server.url`` says which.

    Args:
        config: what to serve.
        environ: where the keys' variables are read (``os.environ`` when None).

    Raises (when entered):
        ConfigError: the config does not make sense (see ``check``), or a key's variable is unset.
        ListenError: the address cannot be listened on.
    """

    def __init__(self, config: Config, *, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self._environ = environ
        self._stack = contextlib.AsyncExitStack()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._stop: anyio.Event | None = None
        self._router: Router | None = None
        self.url = ""
        """``http://host:port`` once entered."""

    @property
    def router(self) -> Router:
        assert self._router is not None, "the server is not running"
        return self._router

    @property
    def fleet(self) -> Fleet:
        return self.router.fleet

    async def __aenter__(self) -> Self:
        config = self.config
        check(config)
        self._stop = anyio.Event()
        replicas, client_key = resolve(config, self._environ)
        sock = _listen(config.host, config.port)
        host, port = sock.getsockname()[:2]
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        catalog = Catalog(config)
        registry = CollectorRegistry()
        options: dict[str, Any] = {}
        if config.headroom is not None:
            options["headroom"] = config.headroom
        options["routers"] = config.routers
        try:
            timeout = httpx.Timeout(
                connect=config.connect_timeout,
                read=config.read_timeout,
                write=config.read_timeout,
                pool=config.connect_timeout,
            )
            limits = httpx.Limits(
                max_connections=config.max_connections,
                max_keepalive_connections=config.max_connections,
                keepalive_expiry=KEEPALIVE_EXPIRY,
            )
            # One TLS context for all: making one reads the CA bundle, some 50 ms of CPU each.
            tls = httpx.create_ssl_context()
            clients = {
                replica.id: await self._stack.enter_async_context(
                    httpx.AsyncClient(cookies=NoCookies(), timeout=timeout, limits=limits, verify=tls)
                )
                for replica in replicas
            }
            fleet = await self._stack.enter_async_context(
                Fleet(
                    replicas=replicas,
                    adapters=catalog.path,
                    pins=dict(config.pins),
                    attempts=config.attempts,
                    load_timeout=config.load_timeout,
                    listing_timeout=config.listing_timeout,
                    listing_interval=config.listing_interval,
                    metrics=PrometheusMetrics(registry, top_adapters=config.metrics_adapters),
                    **options,
                )
            )
            if config.prewarm:
                for name, error in (await fleet.prewarm(config.prewarm)).items():
                    # Not fatal: the router serves the rest, and requests for it get the error then.
                    log.warning("could not prewarm adapter %r: %s", name, error)
            self._router = Router(
                fleet,
                replicas=replicas,
                catalog=catalog,
                clients=clients,
                config=config,
                client_key=client_key,
                registry=registry,
            )
            tasks = anyio.create_task_group()
            await tasks.__aenter__()
        except BaseException:
            sock.close()
            await self._stack.aclose()
            raise
        self._tasks = tasks
        tasks.start_soon(self._serve, sock)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._stop is not None
        self._stop.set()
        tasks = self._tasks
        assert tasks is not None
        try:
            # As the fleet does: the block's exception is not the task group's, and comes out as itself.
            await tasks.__aexit__(None, None, None)
        finally:
            await self._stack.aclose()

    async def _serve(self, sock: socket.socket) -> None:
        assert self._stop is not None

        config = HypercornConfig()
        # hypercorn owns the listening socket from here on, and closes it when it stops.
        config.bind = [f"fd://{sock.detach()}"]
        config.graceful_timeout = self.config.shutdown_timeout
        config.accesslog = None  # the router logs each request itself, in one line
        config.errorlog = logging.getLogger("lorafleet.serve.hypercorn")
        config.include_server_header = False
        if sniffio.current_async_library() == "trio":
            from hypercorn.trio import serve as serve_trio

            await serve_trio(self.router, config, shutdown_trigger=self._stop.wait)  # type: ignore[arg-type]
        else:
            from hypercorn.asyncio import serve as serve_asyncio

            await serve_asyncio(self.router, config, shutdown_trigger=self._stop.wait)  # type: ignore[arg-type]


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port``, so that the port is known before hypercorn starts."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, UnicodeError) as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock
