"""Run the router: a fleet, a client for forwarding, and hypercorn, in the current event loop."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc
import httpx
import sniffio
from hypercorn.config import Config as HypercornConfig
from prometheus_client import CollectorRegistry

from lorafleet_fleet import KEEPALIVE_EXPIRY, Fleet, PrometheusMetrics, Replica

from ._app import NoCookies, Router
from ._catalog import Catalog
from ._config import Config, check, resolve
from ._readiness import Origin, Problem, Readiness, ServeWording
from ._sizing import sizing

log = logging.getLogger("lorafleet.serve")


class _NoStartupLines(logging.Filter):
    """Drops hypercorn's "Running on ... (CTRL + C to quit)": the router says where it listens itself,
    and a program that runs it in-process has its own way to stop it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Running on ")


HYPERCORN_LOG = logging.getLogger("lorafleet.serve.hypercorn")
HYPERCORN_LOG.addFilter(_NoStartupLines())


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
        self._background = anyio.CancelScope()
        """Where the server's own loops run; cancelled when it stops."""
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
        origins = origins_of(config)
        sock = _listen(config.host, config.port)
        host, port = sock.getsockname()[:2]
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        catalog = Catalog(config)
        registry = CollectorRegistry()
        options: dict[str, Any] = {}
        if config.headroom is not None:
            options["headroom"] = config.headroom
        options["routers"] = config.routers
        if config.concurrency is not None:
            options["concurrency"] = config.concurrency
        readiness = Readiness()
        readiness.track(replicas, origins)
        try:
            _wording.install()
            self._stack.callback(_wording.uninstall)
            # The fleet's own client, as the fleet would make it, with the hook that watches its answers.
            fleet_client = await self._stack.enter_async_context(
                httpx.AsyncClient(
                    limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY),
                    event_hooks={"response": [readiness.on_response]},
                )
            )
            fleet = await self._stack.enter_async_context(
                Fleet(
                    client=fleet_client,
                    replicas=replicas,
                    adapters=catalog.path,
                    pins=dict(config.pins),
                    attempts=config.attempts,
                    load_timeout=config.load_timeout,
                    listing_timeout=config.listing_timeout,
                    listing_interval=config.listing_interval,
                    metrics=PrometheusMetrics(registry),
                    **options,
                )
            )
            if config.prewarm:
                for name, error in (await fleet.prewarm(config.prewarm)).items():
                    # Not fatal: the router serves the rest, and requests for it get the error then.
                    log.warning("could not prewarm adapter %r: %s", name, error)
            router = self._router = Router(
                fleet,
                catalog=catalog,
                new_client=_forwarding_client(config),
                config=config,
                client_key=client_key,
                registry=registry,
                readiness=readiness,
            )
            self._stack.push_async_callback(router.aclose)
            await router.set_replicas(replicas, origins)
            tasks = anyio.create_task_group()
            await tasks.__aenter__()
        except BaseException:
            sock.close()
            await self._stack.aclose()
            raise
        self._tasks = tasks
        sized = sizing(config)
        for line in sized.lines:
            log.info("sizing: %s", line)
        for line in sized.warnings:
            log.warning("sizing: %s", line)
        tasks.start_soon(self._serve, sock)
        tasks.start_soon(self._recheck, fleet_client)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._stop is not None
        self._stop.set()
        self._background.cancel()
        tasks = self._tasks
        assert tasks is not None
        try:
            # As the fleet does: the block's exception is not the task group's, and comes out as itself.
            await tasks.__aexit__(None, None, None)
        finally:
            await self._stack.aclose()

    async def _recheck(self, client: httpx.AsyncClient) -> None:
        """Every listing interval, ask the replicas held not ready for absent routes whether they
        have them now: nothing else tells, when no request goes there."""
        with self._background:
            while True:
                await anyio.sleep(self.config.listing_interval)
                router = self.router
                for replica in router.replicas:
                    if replica.id in router.readiness.not_ready(Problem.ROUTES):
                        await router.readiness.recheck(client, replica, self.config.listing_timeout)

    async def _serve(self, sock: socket.socket) -> None:
        assert self._stop is not None

        config = HypercornConfig()
        # hypercorn owns the listening socket from here on, and closes it when it stops.
        config.bind = [f"fd://{sock.detach()}"]
        config.graceful_timeout = self.config.shutdown_timeout
        config.accesslog = None  # the router logs each request itself, in one line
        config.errorlog = HYPERCORN_LOG
        config.include_server_header = False
        if sniffio.current_async_library() == "trio":
            from hypercorn.trio import serve as serve_trio

            await serve_trio(self.router, config, shutdown_trigger=self._stop.wait)  # type: ignore[arg-type]
        else:
            from hypercorn.asyncio import serve as serve_asyncio

            await serve_asyncio(self.router, config, shutdown_trigger=self._stop.wait)  # type: ignore[arg-type]


def _forwarding_client(config: Config) -> Callable[[Replica], httpx.AsyncClient]:
    """What makes each replica's client for forwarding requests."""
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

    def new_client(replica: Replica) -> httpx.AsyncClient:
        return httpx.AsyncClient(cookies=NoCookies(), timeout=timeout, limits=limits, verify=tls)

    return new_client


def origins_of(config: Config) -> dict[str, Origin]:
    """Where each configured replica comes from, by id, as messages name it."""
    return {r.id: Origin(f"replicas[{i}] ({r.id!r})", r.api_key_env) for i, r in enumerate(config.replicas)}


class _Wording:
    """``ServeWording`` on the fleet's logger while at least one router runs in this process."""

    def __init__(self) -> None:
        self._filter = ServeWording()
        self._running = 0

    def install(self) -> None:
        self._running += 1
        logging.getLogger("lorafleet").addFilter(self._filter)

    def uninstall(self) -> None:
        self._running -= 1
        if not self._running:
            logging.getLogger("lorafleet").removeFilter(self._filter)


_wording = _Wording()


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
