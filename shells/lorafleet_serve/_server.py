"""Run the router: a fleet, a client for forwarding, and hypercorn, in the current event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.abc
import attrs
import httpx
import sniffio
from hypercorn.config import Config as HypercornConfig
from prometheus_client import CollectorRegistry
from uvicorn import Server as uvicorn_Server

from lorafleet_fleet import KEEPALIVE_EXPIRY, Fleet, PrometheusMetrics, Replica

from ._admin import Admin, serve_admin
from ._app import NoCookies, Router
from ._catalog import Catalog, fingerprint
from ._config import Config, ConfigError, check, discovered_key, own_key, resolve
from ._forward import AiohttpForwarder, Forwarder
from ._headers import RequestIds
from ._live import Discovery, changes_line, file_state
from ._peers import Peers
from ._readiness import Origin, Problem, Readiness, ServeWording
from ._sizing import sizing

if TYPE_CHECKING:
    from ._tracing import Tracing

log = logging.getLogger("lorafleet.serve")
WATCH_INTERVAL = 1.0
"""Seconds between two looks at the configuration file."""


class _NoStartupLines(logging.Filter):
    """Drops hypercorn's "Running on ... (CTRL + C to quit)": the router says where it listens itself,
    and a program that runs it in-process has its own way to stop it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Running on ")


HYPERCORN_LOG = logging.getLogger("lorafleet.serve.hypercorn")
HYPERCORN_LOG.addFilter(_NoStartupLines())


class _WarningsOnly(logging.Filter):
    """uvicorn's own lines below a warning ("Started server process", "Uvicorn running on..."): the
    router says where it listens itself, and stopping is the program's."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


logging.getLogger("uvicorn.error").addFilter(_WarningsOnly())


class ListenError(Exception):
    """The router cannot listen where it was told to (the address is taken, or not this host's)."""


class RouterServer:
    """The reference router, served by hypercorn on ``config.host``:``config.port``, until the block ends.

    Use it as ``async with RouterServer(config) as server``, under asyncio or trio: entering opens
    the fleet (reading the replicas' listings), resolves the names to discover replicas by, loads
    ``config.prewarm`` (those that do not land at once are loaded as soon as a replica takes them,
    ``Fleet.warm``) and starts listening, with the admin interface on its own port when
    ``config.admin_port`` is set; leaving stops taking connections, gives running requests
    ``config.shutdown_timeout`` seconds, then closes the fleet. Port 0 takes a free port;
    ``server.url`` (and ``server.admin_url``) says which.

    The operator may take a replica out (``drain``) and put it back (``undrain``), here or through
    the admin interface.

    The replicas follow the configuration while it runs: ``reload()`` applies a new one (its
    replicas, discovered names and limits; other settings wait for a restart), each discovered name
    is resolved again every ``interval`` seconds, and with ``watch`` the file is read again when it
    changes.

    Args:
        config: what to serve.
        environ: where the keys' variables are read (``os.environ`` when None).
        source: what ``reload()`` reads the configuration from (the file and flags, for ``lorafleet
            serve``); None: ``reload()`` applies ``config`` again (resolving every name now).
        watch: a file whose changes call ``reload()`` (its target, inode, time and size are looked
            at every ``watch_interval`` seconds: a Kubernetes ConfigMap changes by a symlink swap).
        tracer_provider: an OpenTelemetry tracer provider the router's spans go to (``config.tracing``
            or not). With ``config.tracing`` and none given: the global provider when a program set an
            SDK one, else one that sends them by OTLP where the ``OTEL_*`` variables say, flushed and
            shut down when the server stops.

    Raises (when entered):
        ConfigError: the config does not make sense (see ``check``), or a key's variable is unset.
        ListenError: the address cannot be listened on.
    """

    def __init__(
        self,
        config: Config,
        *,
        environ: Mapping[str, str] | None = None,
        source: Callable[[], Config] | None = None,
        watch: Path | None = None,
        watch_interval: float = WATCH_INTERVAL,
        tracer_provider: Any = None,
    ) -> None:
        self.config = config
        self._tracer_provider = tracer_provider
        self._environ = environ
        self._source = source
        self._watch_path = watch
        self._watch_interval = watch_interval
        self._stack = contextlib.AsyncExitStack()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._stop: anyio.Event | None = None
        self._router: Router | None = None
        self._background = anyio.CancelScope()
        """Where the server's own loops run; cancelled when it stops."""
        self._loops: anyio.abc.TaskGroup | None = None
        self._static: list[Replica] = []
        self._discoveries: list[Discovery] = []
        self._following: dict[Discovery, anyio.CancelScope] = {}
        """The cancel scope of each discovery's loop."""
        self._lock: anyio.Lock | None = None
        self._sized: tuple[str, ...] = ()
        self._known: dict[str, Replica] = {}
        """Every replica the configuration and the discovered names give, drained ones too."""
        self._drained: set[str] = set()
        """Replicas the operator took out, by id: kept out of the fleet whatever the configuration says."""
        self.url = ""
        """``http://host:port`` once entered."""
        self.admin_url = ""
        """The admin interface's ``http://host:port`` once entered, when it has one."""

    @property
    def router(self) -> Router:
        assert self._router is not None, "the server is not running"
        return self._router

    @property
    def fleet(self) -> Fleet:
        return self.router.fleet

    @property
    def peers(self) -> Peers:
        """The routers sharing these replicas, as this one sees them (``[peers]``)."""
        peers = self.router.peers
        assert peers is not None  # the server always gives its router one
        return peers

    async def __aenter__(self) -> Self:
        config = self.config
        check(config)
        self._stop = anyio.Event()
        self._lock = anyio.Lock()
        self._static, client_key = resolve(config, self._environ)
        metrics_key = own_key(config, "metrics", self._environ)
        admin_key = own_key(config, "admin", self._environ)
        self._discoveries = [
            Discovery(entry, i, discovered_key(entry, i, self._environ))
            for i, entry in enumerate(config.discover)
        ]
        sock = _listen(config.host, config.port)
        self.url = _url_of(sock)
        admin_sock: socket.socket | None = None
        if config.admin_port is not None:
            try:
                admin_sock = _listen(config.admin_host, config.admin_port)
            except BaseException:
                sock.close()
                raise
            self.admin_url = _url_of(admin_sock)
        catalog = Catalog(config)
        registry = CollectorRegistry()
        options: dict[str, Any] = {}
        if config.headroom is not None:
            options["headroom"] = config.headroom
        options["routers"] = config.routers
        if config.concurrency is not None:
            options["concurrency"] = config.concurrency
        readiness = Readiness()
        readiness.track(self._static, origins_of(config))
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
            # Taken before the fleet loads them, as a request's version is.
            versions = {
                name: fingerprint(path) for name, path in catalog.paths(config.pins, config.prewarm).items()
            }
            fleet = await self._stack.enter_async_context(
                Fleet(
                    client=fleet_client,
                    replicas=self._static,
                    adapters=catalog.path,
                    pins=dict(config.pins),
                    attempts=config.attempts,
                    load_timeout=config.load_timeout,
                    listing_timeout=config.listing_timeout,
                    listing_interval=config.listing_interval,
                    shared_interval=config.shared_interval,
                    metrics=PrometheusMetrics(registry, top_adapters=config.metrics_adapters),
                    **options,
                )
            )
            # Its own client: the fleet's judges every answer as a replica's.
            peers = Peers(await self._stack.enter_async_context(httpx.AsyncClient()), fleet.stand_by)
            _configure(peers, config)
            router = self._router = Router(
                fleet,
                catalog=catalog,
                new_client=_forwarding_client(config),
                config=config,
                client_key=client_key,
                metrics_key=metrics_key,
                registry=registry,
                readiness=readiness,
                tracing=self._tracing(),
                peers=peers,
            )
            self._stack.push_async_callback(router.aclose)
            for name, version in versions.items():
                router.watch(name, version)
            for discovery in self._discoveries:
                await discovery.resolve()
            await self._apply()
            if config.prewarm:
                await _prewarm(fleet, catalog, config.prewarm)
            tasks = anyio.create_task_group()
            await tasks.__aenter__()
        except BaseException:
            sock.close()
            if admin_sock is not None:
                admin_sock.close()
            await self._stack.aclose()
            raise
        self._tasks = tasks
        self._say_sizing()
        tasks.start_soon(self._serve, sock)
        if admin_sock is not None:
            assert admin_key is not None  # check() wants one with the port
            tasks.start_soon(serve_admin, Admin(self, admin_key), admin_sock, self._stop.wait)
        await tasks.start(self._run_loops, fleet_client)
        return self

    def _tracing(self) -> Tracing | None:
        provider = self._tracer_provider
        if provider is None and self.config.tracing:
            from ._tracing import exporting_provider, global_sdk_provider

            provider = global_sdk_provider()
            if provider is None:
                provider = exporting_provider()
                # Its last spans go out when the server stops (after the fleet, whose close ends none).
                self._stack.callback(provider.shutdown)
        if provider is None:
            return None
        from ._tracing import Tracing

        return Tracing(provider)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._stop is not None
        if self._router is not None:
            self._router.stopping = True
        self._stop.set()
        self._background.cancel()
        tasks = self._tasks
        assert tasks is not None
        try:
            # As the fleet does: the block's exception is not the task group's, and comes out as itself.
            await tasks.__aexit__(None, None, None)
        finally:
            await self._stack.aclose()

    async def reload(self, config: Config | None = None) -> bool:
        """Apply a configuration now: ``config``, else what ``source`` reads (else the current one).

        Its replicas, discovered names, limits and peers take effect at once (every name is resolved now),
        and every adapter the engines refused is asked for again at its next request;
        a setting that needs a restart is named in one log line and left as it runs. A configuration
        that is not valid changes nothing, and is named in one log line.

        Returns:
            Whether it was applied.
        """
        assert self._lock is not None, "the server is not running"
        async with self._lock:
            try:
                if config is not None:
                    new = config
                else:
                    new = self._source() if self._source is not None else self.config
                check(new)
                running = attrs.evolve(self.config, replicas=new.replicas, discover=new.discover)
                check(running)
                static, _ = resolve(running, self._environ)
                keys = [discovered_key(entry, i, self._environ) for i, entry in enumerate(new.discover)]
            except ConfigError as exc:
                log.error("configuration: %s; nothing changed", exc)
                return False
            later = restart_settings(self.config, new)
            if later:
                log.warning(
                    "configuration: %s changed, which takes effect when lorafleet serve restarts; the "
                    "replicas, limits and peers are applied now",
                    ", ".join(later),
                )
            self.config = running
            self._static = static
            kept: list[Discovery] = []
            for i, (entry, key) in enumerate(zip(new.discover, keys, strict=True)):
                same = next((d for d in self._discoveries if d not in kept and d.same_as(entry, key)), None)
                if same is None:
                    same = Discovery(entry, i, key)
                else:
                    same.entry, same.index = entry, i
                kept.append(same)
            for discovery in self._discoveries:
                if discovery not in kept:
                    self._following.pop(discovery).cancel()
            self._discoveries = kept
            for discovery in kept:
                await discovery.resolve()
                if discovery not in self._following:
                    self._follow(discovery)
            self.config = running = attrs.evolve(
                running,
                peers=new.peers,
                peers_dns=new.peers_dns,
                peers_port=new.peers_port,
                peers_interval=new.peers_interval,
            )
            _configure(self.peers, running)
            await self.peers.look()
            self.router.catalog.set_models(running.model_names())
            # The operator may have fixed an adapter in a way no fingerprint shows: ask again.
            self.router.forget_refusals()
            await self.router.look_at_folders()
            await self._apply()
            self._say_sizing()
            return True

    async def _apply(self) -> None:
        """Give the router the replicas the configuration and the discovered names make now, but those
        the operator drained."""
        replicas = list(self._static)
        origins = origins_of(self.config)
        for discovery in self._discoveries:
            for replica in discovery.replicas:
                if replica.id in origins:
                    continue  # another entry has it: the first one configured
                replicas.append(replica)
                origins[replica.id] = discovery.origin
        self._known = {replica.id: replica for replica in replicas}
        router = self.router
        router.drained = frozenset(self._drained)
        changes = await router.set_replicas([r for r in replicas if r.id not in self._drained], origins)
        if changes:
            log.info("%s", changes_line(changes.added, changes.removed, changes.changed))

    # -- the operator's hand ------------------------------------------------------------------------

    def replicas_known(self) -> dict[str, Replica]:
        """Every replica the configuration and the discovered names give now, by id, drained ones too."""
        return dict(self._known)

    @property
    def drained(self) -> frozenset[str]:
        """The replicas the operator took out (``drain``), by id."""
        return frozenset(self._drained)

    async def drain(self, replica: str) -> bool:
        """Send no new request to ``replica``: it leaves the fleet (``Fleet.set_replicas``), so requests
        running there finish on it, those waiting for a load there go elsewhere, and nothing there is
        unloaded. It stays out, whatever the configuration and the discovered names say, until
        ``undrain``. This router's alone: other routers in front of the same replica drain it apart.

        Returns:
            False when it was drained already (nothing changed).

        Raises:
            LookupError: no replica has the id ``replica`` now.
        """
        assert self._lock is not None, "the server is not running"
        async with self._lock:
            if replica in self._drained:
                return False
            if replica not in self._known:
                raise LookupError(replica)
            self._drained.add(replica)
            stats = self.fleet.replica_statistics(replica)
            running = stats.in_flight if stats is not None else 0
            log.info(
                "replica %s drained by the operator: no new request goes there%s",
                replica,
                f"; the {running} of this router's requests there finish there" if running else "",
            )
            await self._apply()
            return True

    async def undrain(self, replica: str) -> bool:
        """Put a drained ``replica`` back: its listing is read afresh, and requests go there again.

        Returns:
            False when it was not drained (nothing changed).

        Raises:
            LookupError: no replica has the id ``replica``, drained or not.
        """
        assert self._lock is not None, "the server is not running"
        async with self._lock:
            if replica not in self._drained:
                if replica not in self._known:
                    raise LookupError(replica)
                return False
            self._drained.discard(replica)
            log.info("replica %s undrained by the operator: it takes requests again", replica)
            await self._apply()
            return True

    def _say_sizing(self) -> None:
        sized = sizing(self.config)
        for line in sized.lines:
            if line not in self._sized:
                log.info("sizing: %s", line)
        for line in sized.warnings:
            if line not in self._sized:
                log.warning("sizing: %s", line)
        self._sized = (*sized.lines, *sized.warnings)

    # -- the server's own loops ---------------------------------------------------------------------

    async def _run_loops(
        self, fleet_client: httpx.AsyncClient, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        with self._background:
            async with anyio.create_task_group() as loops:
                self._loops = loops
                loops.start_soon(self._recheck, fleet_client)
                loops.start_soon(self._refresh_adapters)
                loops.start_soon(self.router.lines.write)
                loops.start_soon(self.peers.run)
                if self._watch_path is not None:
                    loops.start_soon(self._watch, self._watch_path, file_state(self._watch_path))
                for discovery in self._discoveries:
                    self._follow(discovery)
                task_status.started()
                await anyio.sleep_forever()

    def _follow(self, discovery: Discovery) -> None:
        assert self._loops is not None
        scope = self._following[discovery] = anyio.CancelScope()
        self._loops.start_soon(self._resolve_again, discovery, scope)

    async def _resolve_again(self, discovery: Discovery, scope: anyio.CancelScope) -> None:
        """Resolve ``discovery``'s name every ``interval`` seconds, and apply what changed."""
        with scope:
            while True:
                await anyio.sleep(discovery.entry.interval)
                assert self._lock is not None
                async with self._lock:
                    if await discovery.resolve():
                        await self._apply()

    async def _watch(self, path: Path, seen: tuple[str, int, int, int, int] | None) -> None:
        """Read the configuration again whenever ``path`` changes."""
        while True:
            await anyio.sleep(self._watch_interval)
            state = file_state(path)
            if state != seen:
                seen = state
                log.info("configuration: %s changed; reading it again", path)
                await self.reload()

    async def _refresh_adapters(self) -> None:
        """Every ``adapter_refresh`` seconds, look for new files in the adapters' folders."""
        while True:
            await anyio.sleep(self.config.adapter_refresh)
            await self.router.look_at_folders()

    async def _recheck(self, client: httpx.AsyncClient) -> None:
        """Every listing interval, ask the replicas held not ready for absent routes whether they
        have them now: nothing else tells, when no request goes there."""
        while True:
            await anyio.sleep(self.config.listing_interval)
            router = self.router
            for replica in router.replicas:
                if replica.id in router.readiness.not_ready(Problem.ROUTES):
                    await router.readiness.recheck(client, replica, self.config.listing_timeout)

    async def _serve(self, sock: socket.socket) -> None:
        assert self._stop is not None
        if sniffio.current_async_library() != "trio":
            await self._serve_uvicorn(sock)
            return
        config = HypercornConfig()
        # hypercorn owns the listening socket from here on, and closes it when it stops.
        config.bind = [f"fd://{sock.detach()}"]
        config.graceful_timeout = self.config.shutdown_timeout
        config.accesslog = None  # the router logs each request itself, in one line
        config.errorlog = HYPERCORN_LOG
        config.include_server_header = False
        from hypercorn.trio import serve as serve_trio

        await serve_trio(self.router, config, shutdown_trigger=self._stop.wait)  # type: ignore[arg-type]

    async def _serve_uvicorn(self, sock: socket.socket) -> None:
        """Serve with uvicorn and httptools under asyncio: hypercorn's h11 and its task per request
        cost about a third of a millisecond of CPU per request more (bench/NOTES.md)."""
        import uvicorn

        assert self._stop is not None
        config = uvicorn.Config(
            self.router,
            http="httptools",
            ws="none",
            lifespan="off",
            loop="none",
            access_log=False,  # the router logs each request itself, in one line
            log_config=None,
            server_header=False,
            # The router reads no client address; X-Forwarded-* go to the replica as sent.
            proxy_headers=False,
            # Typed int, used as asyncio.timeout's seconds: a fraction works.
            timeout_graceful_shutdown=self.config.shutdown_timeout,  # type: ignore[arg-type]
            backlog=1024,
        )
        server = _Uvicorn(config)
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        try:
            await self._stop.wait()
        finally:
            server.should_exit = True
            with anyio.CancelScope(shield=True):
                await serving
            sock.close()


async def _prewarm(fleet: Fleet, catalog: Catalog, names: tuple[str, ...]) -> None:
    """Load ``names`` before taking requests, each for its base model; one that does not land now (its
    replicas are not up yet, the engine refused it) is loaded as soon as a replica takes it."""
    by_model: dict[str | None, list[str]] = {}
    for name in names:
        by_model.setdefault(catalog.model(name), []).append(name)
    for model, group in by_model.items():
        for name, error in (await fleet.prewarm(group, model=model)).items():
            # Not fatal: the router serves the rest, and requests for it get the error meanwhile.
            log.warning(
                "could not prewarm adapter %r yet: %s; it is loaded once a replica takes it", name, error
            )
            fleet.warm(name, model=model)


def _configure(peers: Peers, config: Config) -> None:
    peers.configure(
        urls=config.peers, dns=config.peers_dns, port=config.peers_port, interval=config.peers_interval
    )


def _url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


class _Uvicorn(uvicorn_Server):
    """uvicorn's server, leaving signals to the program that runs it (``lorafleet serve`` has its own)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _forwarding_client(config: Config) -> Callable[[Replica], httpx.AsyncClient | Forwarder]:
    """What makes each replica's client for forwarding requests: aiohttp's under asyncio (a fraction
    of httpx's CPU per request, bench/NOTES.md), httpx's under trio."""
    # One TLS context for all: making one reads the CA bundle, some 50 ms of CPU each.
    tls = httpx.create_ssl_context()
    if sniffio.current_async_library() != "trio":

        def new_forwarder(replica: Replica) -> Forwarder:
            return AiohttpForwarder(
                connect=config.connect_timeout,
                read=config.read_timeout,
                max_connections=config.max_connections,
                tls=tls,
            )

        return new_forwarder
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

    def new_client(replica: Replica) -> httpx.AsyncClient:
        return httpx.AsyncClient(cookies=NoCookies(), timeout=timeout, limits=limits, verify=tls)

    return new_client


RESTART = {
    "adapter_root": "adapters.root",
    "adapter_paths": "adapters.paths",
    "adapter_models": "adapters.paths (model)",
    "adapter_model": "adapters.model",
    "pins": "pins",
    "prewarm": "fleet.prewarm",
    "host": "server.host",
    "port": "server.port",
    "api_key_env": "server.api_key_env",
    "metrics_api_key_env": "server.metrics_api_key_env",
    "admin_host": "admin.host",
    "admin_port": "admin.port",
    "admin_api_key_env": "admin.api_key_env",
    "max_body_bytes": "server.max_body_bytes",
    "load_timeout": "timeouts.load",
    "listing_timeout": "timeouts.listing",
    "listing_interval": "timeouts.listing_interval",
    "shared_interval": "timeouts.shared_interval",
    "adapter_refresh": "adapters.refresh",
    "connect_timeout": "timeouts.connect",
    "read_timeout": "timeouts.read",
    "shutdown_timeout": "timeouts.shutdown",
    "headroom": "fleet.headroom",
    "attempts": "fleet.attempts",
    "routers": "fleet.routers",
    "concurrency": "fleet.concurrency",
    "max_connections": "server.max_connections",
    "request_log": "server.request_log",
    "request_log_max_bytes": "server.request_log_max_bytes",
    "tracing": "server.tracing",
}
"""The settings a running router keeps until it restarts, by ``Config`` field: every one but the
replicas and the discovered names (and with them the limits and keys)."""


def restart_settings(running: Config, new: Config) -> list[str]:
    """The settings, by name, that ``new`` changes and that wait for a restart."""
    return [name for field, name in RESTART.items() if getattr(running, field) != getattr(new, field)]


def origins_of(config: Config) -> dict[str, Origin]:
    """Where each configured replica comes from, by id, as messages name it."""
    return {r.id: Origin(f"replicas[{i}] ({r.id!r})", r.api_key_env) for i, r in enumerate(config.replicas)}


class _Wording:
    """``ServeWording`` on the fleet's logger, and ``RequestIds`` on the fleet's and the router's, while
    at least one router runs in this process."""

    def __init__(self) -> None:
        self._filter = ServeWording()
        self._ids = RequestIds()
        self._running = 0

    def install(self) -> None:
        self._running += 1
        logging.getLogger("lorafleet").addFilter(self._filter)
        for name in ("lorafleet", "lorafleet.serve"):
            logging.getLogger(name).addFilter(self._ids)

    def uninstall(self) -> None:
        self._running -= 1
        if not self._running:
            logging.getLogger("lorafleet").removeFilter(self._filter)
            for name in ("lorafleet", "lorafleet.serve"):
                logging.getLogger(name).removeFilter(self._ids)


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
