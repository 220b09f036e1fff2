"""The reference router: an OpenAI-compatible ASGI app in front of vLLM replicas, on a lorafleet Fleet.

A request to one of vLLM's routes that name a model (``_routes``: completions, chat, responses,
embeddings, tokenize...) names an adapter (or a base model) in its ``model``; the fleet places it on a
replica and loads it there if need be (``Fleet.route``), and the router forwards the request, with the
client's headers (``_headers``), and relays the answer, streamed or not, holding the lease until the
replica's last byte is in (``_pass_on``) or the client has gone. A replica that gives no answer (no
connection, a timeout) is reported to the fleet, which avoids it for a while, and the request goes to
another one.
A server error (a 5xx) is judged by the fleet ([blame]): on the first replica to answer so, the
request goes to another one, and the first is avoided only once another serves it; a second replica
answering so makes it the request's fault, answered with a 502 at once. An answer "the model ... does
not exist" (the replica lost the adapter, e.g. in a restart) is reported on the lease, and the request
is placed once more, which loads the adapter again.

Everything about adapters is the fleet's; this module only parses, forwards, relays and counts.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import hmac
import http.cookiejar
import itertools
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import attrs
import httpx
import sniffio

from lorafleet_fleet import (
    AdapterError,
    Fault,
    Fleet,
    FleetClosedError,
    Replica,
    ReplicaChanges,
    ReplicaError,
    Route,
)

from ._catalog import Catalog, Fingerprint, fingerprint
from ._config import Config
from ._forward import Answer, BusyError, CutError, Forwarder, HttpxForwarder, NoAnswerError
from ._headers import REQUEST_ID, VIA, logfmt, relayed, request_id, upstream_headers
from ._health import replica_states
from ._keys import require
from ._latency import Latency
from ._lines import Lines
from ._openai import (
    JSON,
    Receive,
    RefusedError,
    Scope,
    Send,
    lifespan,
    model_not_found,
    refuse,
    respond,
    respond_json,
    want_method,
)
from ._readiness import Origin, Readiness
from ._requestlog import RequestLog, Watch
from ._routes import OWN, ROUTED, listing

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ._peers import Peers
    from ._tracing import Tracing

log = logging.getLogger("lorafleet.serve")

DRAIN_FLOOR = 16 << 20
"""The router reads (and drops) the body of a request it refuses, up to 4 times ``max_body_bytes`` and
at least this much, before it answers: see ``Router._drained``."""
ERROR_HEAD_BYTES = 64 << 10
MISSING_RETRIES = 3
"""How many times a request whose replica answered "no such model" is placed again (the adapter
loaded back where placement says): another router's unload, or a restart, between the load and the
forward. Past that, the engine's 404 goes to the client: an engine that loads an adapter and then
denies it every time is misconfigured, and retrying forever would hide it."""
"""How much of a replica's error answer is read to judge it ("does not exist"?) before relaying it."""


class NoCookies(http.cookiejar.CookieJar):
    """The cookie jar of the client a router forwards with: it keeps nothing.

    A router relays its replicas' answers to many clients; a cookie one answer set must never ride
    along on another client's request. (It also spares httpx's cookie handling on every answer.)
    """

    def extract_cookies(self, response: Any, request: Any) -> None:
        return

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        return


RELAYED = "relayed"
"""``how`` of a request relayed to the router that decides."""


class _Outcome(enum.Enum):
    DONE = enum.auto()
    """The answer was relayed (or the client went away while it was)."""
    MISSING = enum.auto()
    """The replica does not have the adapter: reported, place the request again."""
    FAULT = enum.auto()
    """The replica gave no answer, or cut it before it began: reported, try another replica."""
    SERVER_ERROR = enum.auto()
    """The replica answered with a server error, the replica's fault ([blame]): try another one."""


@attrs.define
class _Record:
    """What one request's log line says."""

    method: str
    path: str
    started: float
    request_id: bytes = b""
    forward: Sequence[tuple[bytes, bytes]] = ()
    """The client's headers that go upstream, the request's id among them."""
    model: str | None = None
    replica: str | None = None
    how: str | None = None
    status: int = 0
    attempts: int = 0
    stream: bool = False
    error: str | None = None
    end: str = "done"
    adapter_ms: float | None = None
    """Milliseconds spent getting the adapter ready (routing, loads), for requests that name one."""
    engine: tuple[int, bytes] | None = None
    """The last server error a replica answered the request with: its status and the head of its body."""
    answered: bool = False
    """The answer's last message is being sent: a disconnect from now on is the client being done."""
    retries: tuple[str, ...] = ()
    """Why the request was placed again, each time (``replica_failed``, ``server_error``...)."""
    first: float = 0.0
    """``time.perf_counter()`` when the first byte of the answer's body was relayed (0: none yet)."""
    took: float | None = None
    """Seconds from arrival to the end, once the request ended."""
    via: bytes | None = None
    """The router that relayed the request here (``_headers.VIA``), if one did."""

    def line(self) -> str:
        """The log line: logfmt, ``key=value`` pairs, values a client chose quoted when not plain."""
        text = f"method={self.method} path={logfmt(self.path)}"
        if self.request_id:
            text += f" request_id={logfmt(self.request_id.decode('latin-1'))}"
        if self.model is not None:
            text += f" model={logfmt(self.model)}"
        if self.replica is not None:
            text += f" replica={logfmt(self.replica)} how={self.how}"
        text += f" status={self.status} attempts={self.attempts} stream={'true' if self.stream else 'false'}"
        if self.adapter_ms is not None:
            text += f" adapter_ms={self.adapter_ms:.1f}"
        took = self.took if self.took is not None else time.perf_counter() - self.started
        text += f" ms={took * 1000:.1f} end={self.end}"
        if self.error is not None:
            text += f" error={self.error}"
        return text


@attrs.define(eq=False)
class _Upstream:
    """A replica as the router forwards to it: its own connection pool, headers and URLs.

    One pool per replica: httpx looks over every connection of its pool for each request, so many
    replicas' connections in one pool cost every request.
    """

    replica: Replica
    client: Forwarder
    headers: list[tuple[bytes, bytes]]
    urls: dict[str, str]
    running: int = 0
    """Requests being forwarded to it now, adapters' and base models' alike."""
    base: int = 0
    """Base-model requests in flight: the fleet counts only the adapters' requests."""
    retired: bool = False
    """No longer among the replicas: its pool is closed once ``running`` is back to 0."""

    @property
    def key(self) -> tuple[str, str, str | None]:
        """Which server it is: an id with another URL or key is another server."""
        return _server_of(self.replica)


def _server_of(replica: Replica) -> tuple[str, str, str | None]:
    return replica.id, replica.url, replica.api_key


class Router:
    """lorafleet's reference router, as an ASGI app: serve it with any ASGI server (``RouterServer``
    serves it with hypercorn).

    Routes: ``POST`` to each of vLLM's routes that name a model (``_routes.ROUTED``: forwarded),
    ``GET /v1/models`` (the base models and the adapters it serves), ``GET /health`` and ``GET
    /metrics``. With a key, every route but ``/health`` and ``/metrics`` wants ``Authorization: Bearer
    <key>``; ``/metrics`` wants one only when it has a key of its own (``metrics_key``).

    Give it its replicas with ``await router.set_replicas(...)`` before it takes requests, and again
    whenever they change; ``await router.aclose()`` when it is done.

    Args:
        fleet: an entered fleet that resolves adapters with ``catalog``.
        catalog: the adapters served.
        new_client: makes the client a replica's requests are forwarded with: an httpx client (give
            it ``cookies=NoCookies()``) or a ``Forwarder``; the router closes it when the replica is
            gone and idle.
        config: timeouts, bounds and attempts.
        client_key: the key this router's clients must send (None: none).
        metrics_key: the key ``GET /metrics`` wants (None: none); never the clients' key by default,
            as Prometheus is no client.
        registry: where the router's own metrics go, beside the fleet's (None: no metrics of its own).
        readiness: what the router saw of its replicas' misconfigurations (None: nothing is watched).
        tracing: makes a span of each routed request (None: no traces; ``_tracing``).
        peers: the routers sharing these replicas, one of which decides for all (None: this router
            decides alone; ``_peers``).
    """

    def __init__(
        self,
        fleet: Fleet,
        *,
        catalog: Catalog,
        new_client: Callable[[Replica], httpx.AsyncClient | Forwarder],
        config: Config,
        client_key: str | None = None,
        metrics_key: str | None = None,
        registry: CollectorRegistry | None = None,
        readiness: Readiness | None = None,
        tracing: Tracing | None = None,
        peers: Peers | None = None,
    ) -> None:
        self.fleet = fleet
        self.peers = peers
        self._leaders: dict[str, _Upstream] = {}
        """A pool for each router relayed to, by URL."""
        self._tracing = tracing
        self.catalog = catalog
        self._new_client = new_client
        self._key = client_key.encode() if client_key is not None else None
        self._metrics_key = metrics_key.encode() if metrics_key is not None else None
        self._max_body = config.max_body_bytes
        self._drain = max(4 * config.max_body_bytes, DRAIN_FLOOR)
        self._attempts = config.attempts
        self._upstreams: dict[str, _Upstream] = {}
        """The replicas, by id, in the order given."""
        self._retired: dict[tuple[str, str, str | None], _Upstream] = {}
        """Replicas no longer among them, with requests still running there."""
        self._by_model: dict[str, list[_Upstream]] = {}
        self._turn = 0
        self._created = int(time.time())
        self._registry = registry
        self._metrics = _Metrics(registry, peers) if registry is not None else None
        self._latency: Latency | None = None
        if registry is not None:
            top = config.metrics_adapters
            self._latency = Latency(lambda: fleet.adapter_statistics(top=top).adapters)
            registry.register(self._latency)
        self.readiness = readiness if readiness is not None else Readiness()
        self._refused: dict[str, Fingerprint] = {}
        """Adapters the engines refused, with what their folder held then: a change forgets it."""
        self._versions: dict[str, Fingerprint] = {}
        """What each adapter's folder held when this router first asked the fleet for it: a folder that
        holds something else since is a new version (``look_at_folders``)."""
        self.lines = Lines(log)
        """Each request's log line; ``lines.write()`` writes them in batches while it runs."""
        self._asyncio: bool | None = None
        """Whether the router runs under asyncio (known at its first routed request)."""
        self.drained: Collection[str] = ()
        """Replicas the operator took out (``RouterServer.drain``), which ``/health`` names so."""
        self.stopping = False
        """The router is shutting down: ``/health`` says so (503), so that probes and peers leave it."""
        self._requests = (
            RequestLog(config.request_log, config.request_log_max_bytes) if config.request_log else None
        )

    def forget_refusal(self, name: str) -> None:
        """Adapter ``name``'s next request asks an engine again, even if the engines refused it (the
        operator's word: its files were fixed)."""
        self._refused.pop(name, None)
        self.fleet.forget_refusal(name)

    def forget_refusals(self) -> None:
        """Every adapter the engines refused is asked for again at its next request (its files may
        have been fixed in a way their fingerprint does not show)."""
        self._refused.clear()
        self.fleet.forget_refusal()

    def dismiss(self, replica: str, name: str) -> None:
        """Unload adapter ``name`` from ``replica`` now, where it is idle ([dismiss]); raises the
        fleet's ``NotIdleError`` (or ``UnknownReplicaError``) otherwise, having changed nothing."""
        self.fleet.dismiss(replica, name)
        log.info("adapter %r: unloaded from %s at the operator's word", name, replica)

    def watch(self, name: str, version: Fingerprint) -> None:
        """Take ``version`` (what adapter ``name``'s folder holds now) as its version, unless this
        router has one already. Taken before the fleet is first asked for it, so that no engine read
        files older than the version: a change after is seen."""
        self._versions.setdefault(name, version)

    async def look_at_folders(self) -> list[str]:
        """Look at the folder of each adapter this router has asked for (in a worker thread: one
        ``stat`` per file, a slow disk stalls no request); one that holds something else than its
        version is a new version (``adapter_changed``). A folder that cannot be read now is left
        alone until it can: a passing error must not unload every copy.

        Returns:
            The adapters found changed, sorted.
        """
        folders = {name: self.catalog.path(name) for name in self._versions}
        now = await anyio.to_thread.run_sync(
            lambda: {name: fingerprint(folder) for name, folder in folders.items() if folder is not None}
        )
        changed = sorted(
            name
            for name, found in now.items()
            if found is not None and name in self._versions and found != self._versions[name]
        )
        for name in changed:
            self.adapter_changed(name, now[name])
        return changed

    def adapter_changed(self, name: str, found: Fingerprint | None = None) -> None:
        """Adapter ``name``'s files are new (``found``: what its folder holds now; None: look): no
        copy loaded before is granted again, idle ones are unloaded at once and the rest after their
        last request, its refusal is forgotten, and its next request loads the new files ([renew])."""
        folder = self.catalog.path(name)
        if found is None and folder is not None:
            found = fingerprint(folder)
        self._versions[name] = found
        self._refused.pop(name, None)
        self.fleet.adapter_changed(name)
        log.info(
            "adapter %r: new files in %s: copies loaded before are unloaded as their last request ends; "
            "its next request loads the new ones",
            name,
            folder,
        )

    def _forgive_if_changed(self, name: str, path: str) -> None:
        """A refused adapter whose folder changed since is tried again ([forgive]): fixed, it loads
        at once rather than after the refusal runs out."""
        if name in self._refused and fingerprint(path) != self._refused[name]:
            del self._refused[name]
            log.info("adapter %r: its folder changed since the engine refused it: trying it again", name)
            self.fleet.forget_refusal(name)

    @property
    def replicas(self) -> list[Replica]:
        """The replicas requests go to, in the order given."""
        return [upstream.replica for upstream in self._upstreams.values()]

    async def set_replicas(
        self, replicas: Sequence[Replica], origins: Mapping[str, Origin] | None = None
    ) -> ReplicaChanges:
        """Send requests to ``replicas`` from now on (the fleet's ``set_replicas``): requests running
        on one no longer named end as ever, and its connections are closed after the last.

        Args:
            origins: where each replica comes from in the configuration, by id, for messages.

        Raises:
            InvalidValueError: two replicas have the same id.
        """
        wanted = {r.id: r for r in replicas}
        if len(wanted) != len(replicas):
            self.fleet.set_replicas(replicas)  # raises, naming the id
        known = self._upstreams
        # The fleet takes a known id on the same URL with another model as a conflict: another server
        # as far as this router knows, so the old one goes first.
        moved = [
            rid
            for rid, r in wanted.items()
            if rid in known and known[rid].replica.url == r.url and known[rid].replica.model != r.model
        ]
        if moved:
            self.fleet.set_replicas([u.replica for rid, u in known.items() if rid not in moved])
        changes = self.fleet.set_replicas(replicas)
        if moved:
            changes = attrs.evolve(
                changes,
                added=tuple(rid for rid in changes.added if rid not in moved),
                changed=tuple(sorted({*changes.changed, *moved})),
            )
        upstreams: dict[str, _Upstream] = {}
        for rid, replica in wanted.items():
            upstream = known.get(rid)
            if upstream is not None and upstream.key == _server_of(replica) and rid not in moved:
                upstream.replica = replica  # another limit: the same server
            else:
                upstream = self._upstream(replica)
            upstreams[rid] = upstream
        gone = [u for rid, u in known.items() if upstreams.get(rid) is not u]
        self._upstreams = upstreams
        self._by_model = {}
        for upstream in upstreams.values():
            self._by_model.setdefault(upstream.replica.model, []).append(upstream)
        self.readiness.track(replicas, origins or {})
        for upstream in gone:
            await self._retire(upstream)
        return changes

    def _upstream(self, replica: Replica) -> _Upstream:
        # The request's own headers go first (``_headers.upstream``); these are the replica's.
        headers = [(b"accept-encoding", b"identity")]
        if replica.api_key:
            headers.append((b"authorization", f"Bearer {replica.api_key}".encode()))
        urls = {path: replica.url + path for path in ROUTED}
        client = self._new_client(replica)
        if isinstance(client, httpx.AsyncClient):
            client = HttpxForwarder(client)
        return _Upstream(replica, client, headers, urls)

    def _upstream_for(self, replica: Replica) -> _Upstream:
        """Where to forward a request granted on ``replica``: the server it was granted on, even when
        the replicas changed since."""
        server = _server_of(replica)
        upstream = self._upstreams.get(replica.id)
        if upstream is not None and upstream.key == server:
            return upstream
        upstream = self._retired.get(server)
        if upstream is None:
            # Granted just before the replica was removed and its pool closed: a pool for this request.
            upstream = self._retired[server] = self._upstream(replica)
            upstream.retired = True
        return upstream

    async def _retire(self, upstream: _Upstream) -> None:
        upstream.retired = True
        if upstream.running:
            self._retired[upstream.key] = upstream
        else:
            await self._close(upstream)

    async def _close(self, upstream: _Upstream) -> None:
        if self._retired.get(upstream.key) is upstream:
            del self._retired[upstream.key]
        with anyio.CancelScope(shield=True):
            await upstream.client.aclose()

    async def aclose(self) -> None:
        """Close every replica's connections."""
        upstreams = [*self._upstreams.values(), *self._retired.values(), *self._leaders.values()]
        self._upstreams, self._by_model, self._leaders = {}, {}, {}
        if self._requests is not None:
            self._requests.close()
        for upstream in upstreams:
            await self._close(upstream)

    # -- ASGI ---------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await lifespan(receive, send)
            return
        if kind != "http":
            return  # websockets: not served; returning closes the connection
        method: str = scope["method"]
        path: str = scope["path"]
        route = ROUTED.get(path)
        if route is not None and method == "POST":
            await self._routed(scope, receive, send, route)
            return
        record = _Record(method, path, time.perf_counter())
        try:
            try:
                # These routes take no body; one sent is read and dropped, so that the connection
                # can take the next request.
                if not await self._drop_body(receive):
                    raise _closing(_too_large(self._max_body))
            except _ClientGoneError:
                record.end = "client_gone"
                return
            wanted = "POST" if route is not None else OWN.get(path)
            if wanted is None:
                raise RefusedError(
                    404, f"Invalid URL ({method} {path}); the routes here are: {listing()}", "not_found"
                )
            want_method(method, wanted, path)
            if path == "/health":
                record.status = await self._health(send)
            elif path == "/metrics":
                if self._metrics_key is not None:
                    require(scope, self._metrics_key, "This router's /metrics")
                record.status = await self._metrics_page(send)
            else:
                self._authorize(scope)
                record.status = await self._models(send)
        except RefusedError as refusal:
            record.status, record.error = refusal.status, refusal.code
            await refuse(send, refusal)
        finally:
            # /metrics and /health are scraped and probed often: not worth a line each.
            if path != "/metrics" and path != "/health" and log.isEnabledFor(logging.INFO):
                record.took = time.perf_counter() - record.started
                self.lines.add(record.line)

    # -- routed requests ----------------------------------------------------------------------

    async def _routed(self, scope: Scope, receive: Receive, send: Send, route: str) -> None:
        record = _Record("POST", scope["path"], time.perf_counter())
        record.forward, record.request_id = upstream_headers(scope["headers"])
        if self.peers is not None:
            record.via = next((v for k, v in scope["headers"] if k == VIA), None)
        named = request_id.set(record.request_id)
        tracing = self._tracing
        span = tracing.start(record, route) if tracing is not None else None
        watch = self._requests.watch(send) if self._requests is not None else None
        if watch is not None:
            send = watch.send
        metrics = self._metrics
        if metrics is not None:
            metrics.in_flight += 1
        try:
            try:
                try:
                    self._authorize(scope)
                except RefusedError as refusal:
                    raise await self._drained(receive, refusal) from None
                raw = await self._read_body(scope, receive)
                model, record.stream = _model_of(raw)
            except RefusedError as refusal:
                await self._refuse(send, refusal, record)
                return
            except _ClientGoneError:
                record.end = "client_gone"
                return
            record.model = model
            # The body is read: the next message is the client going away, which ends everything, a
            # wait for a load included (the load goes on for others) and the lease with it.
            if self._asyncio is None:
                self._asyncio = sniffio.current_async_library() == "asyncio"
            if self._asyncio:
                # A task group costs about 20 µs a request under asyncio, a sixth of the router's
                # own work on a hit; a bare task and a cancel scope do the same for 6 (bench/NOTES.md).
                gone = anyio.CancelScope()
                watcher = asyncio.get_running_loop().create_task(_watch_for_disconnect(receive, gone, record))
                try:
                    with gone:
                        await self._answer(model, scope["path"], raw, send, record)
                finally:
                    watcher.cancel()
            else:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(_watch_for_disconnect, receive, tasks.cancel_scope, record)
                    try:
                        await self._answer(model, scope["path"], raw, send, record)
                    finally:
                        if not record.answered:
                            tasks.cancel_scope.cancel()
                        # Else the watcher ends by itself: once the answer is sent, the next message
                        # an ASGI server gives is http.disconnect, at once (cheaper than cancelling).
        finally:
            took = record.took = time.perf_counter() - record.started
            if metrics is not None:
                metrics.in_flight -= 1
                metrics.answered(route, record.status, took)
            latency = self._latency
            # A relayed request is the leader's to count by adapter, and to log ([peers]).
            relayed = record.how == RELAYED
            if latency is not None and record.how is not None and not relayed:
                streamed = record.stream and record.first and record.status == 200
                ttft = record.first - record.started if streamed else None
                latency.observe(None if record.how == "base" else record.model, record.how, ttft, took)
            if log.isEnabledFor(logging.INFO):
                self.lines.add(record.line)
            if watch is not None and not relayed:
                self._log_request(watch, record)
            if span is not None:
                assert tracing is not None
                tracing.end(span, record, record.how == "base" or record.model in self.catalog.bases)
            request_id.reset(named)

    async def _answer(self, model: str, path: str, raw: bytes, send: Send, record: _Record) -> None:
        """Serve a routed request whose body is read, answering every way it can end."""
        try:
            peers = self.peers
            if (
                peers is not None
                and peers.leader is not None
                and record.via is None
                and await self._to_leader(peers, peers.leader, path, raw, send, record)
            ):
                return
            if model in self.catalog.bases:
                await self._base_request(model, path, raw, send, record)
            else:
                await self._adapter_request(model, path, raw, send, record)
        except RefusedError as refusal:
            await self._refuse(send, refusal, record)
        except Exception:
            log.exception("the router failed on a request (%s)", record.line())
            record.error = "internal_error"
            if record.status == 0:
                failure = RefusedError(
                    500, "The router failed; see its log", "internal_error", kind="server_error"
                )
                await self._refuse(send, failure, record)
            else:
                record.end = "cut"  # part of the answer went out: ending now cuts it

    def _log_request(self, watch: Watch, record: _Record) -> None:
        """The request's line in the request log."""
        assert self._requests is not None
        base = record.how == "base" or record.model in self.catalog.bases
        upstream = self._upstreams.get(record.replica) if record.replica is not None else None
        self._requests.write(
            watch,
            adapter=None if base else record.model,
            model=record.model if base else upstream.replica.model if upstream else None,
            replica=record.replica,
            how=record.how,
            wait_ms=record.adapter_ms,
            stream=record.stream,
            status=record.status,
            attempts=record.attempts,
            end=record.end,
            error=record.error,
            request_id=record.request_id.decode("latin-1"),
        )

    @staticmethod
    async def _refuse(send: Send, refusal: RefusedError, record: _Record) -> None:
        record.status, record.error = refusal.status, refusal.code
        record.answered = True
        await refuse(send, refusal, (REQUEST_ID, record.request_id))

    async def _adapter_request(self, name: str, path: str, raw: bytes, send: Send, record: _Record) -> None:
        folder = self.catalog.path(name)
        if folder is None:
            raise model_not_found(name)
        if name not in self._versions:
            self.watch(name, fingerprint(folder))
        if self._refused:
            self._forgive_if_changed(name, folder)
        model = self.catalog.model(name)
        faults = missing = 0
        lease: Route | None = None
        while True:
            record.attempts += 1
            asked = time.perf_counter()
            try:
                # A retry carries its previous attempt: the replicas tried, and those that failed it.
                # The folder is the catalog's answer above: the fleet need not ask it again.
                lease = await self.fleet.route(name, model=model, path=folder, after=lease)
            except AdapterError as refused:
                if name not in self._refused:
                    self._refused[name] = fingerprint(folder)
                # The engine's words say what to fix; the folder they may name is the server's own
                # business, so it goes as vLLM's own sanitizer writes it.
                reason = refused.message.replace(folder, "<path>") or "no reason given"
                raise RefusedError(
                    400,
                    f"The adapter `{name}` could not be loaded: the engine refused it: {reason}",
                    "adapter_refused",
                    param="model",
                ) from None
            except ReplicaError:
                if faults:
                    # Replicas already failed this request, and placement now avoids the rest.
                    raise _all_failed(faults, record.engine) from None
                if self._none_ready(model):
                    # Waiting will not help: say where the router says why.
                    message = f"No replica can load `{name}`: each is not ready; see the router's /health"
                else:
                    message = f"No replica could serve `{name}` now; try again later"
                raise RefusedError(503, message, "no_replica", kind="server_error") from None
            except FleetClosedError:
                raise RefusedError(
                    503, "The router is shutting down", "shutting_down", kind="server_error"
                ) from None
            record.adapter_ms = (record.adapter_ms or 0.0) + (time.perf_counter() - asked) * 1000
            outcome = None
            try:
                replica = lease.replica
                upstream = self._upstream_for(replica)
                record.replica, record.how = replica.id, lease.how.value
                timing = (b"server-timing", f"adapter;dur={record.adapter_ms:.1f}".encode())
                extra = [
                    (b"x-lorafleet-replica", replica.id.encode()),
                    (b"x-lorafleet-how", record.how.encode()),
                    timing,
                ]
                may_retry = missing < MISSING_RETRIES
                outcome = await self._forward(upstream, path, raw, send, record, extra, lease, may_retry)
            finally:
                # Anything but an outcome (the client gone, the request's own 502) is no answer served.
                lease.release(served=outcome is not None)
            if outcome is _Outcome.DONE:
                return
            if outcome is _Outcome.MISSING:
                missing += 1
                self._count_retry(record, "adapter_missing")
                continue
            faults += 1
            if faults >= self._attempts:
                raise _all_failed(faults, record.engine)
            self._count_retry(record, _reason(outcome))

    async def _base_request(self, model: str, path: str, raw: bytes, send: Send, record: _Record) -> None:
        tried: set[str] = set()
        failed: list[str] = []  # those of them that answered with a server error ([blame])
        while True:
            record.attempts += 1
            upstream = self._least_busy(model, tried)
            if upstream is None:
                if tried:
                    raise _all_failed(len(tried), record.engine)
                raise RefusedError(
                    503,
                    f"No replica of `{model}` is healthy now; try again later",
                    "no_replica",
                    kind="server_error",
                )
            rid = upstream.replica.id
            tried.add(rid)
            record.replica, record.how = rid, "base"
            extra = [(b"x-lorafleet-replica", rid.encode()), (b"x-lorafleet-how", b"base")]
            upstream.base += 1
            try:
                outcome = await self._forward(upstream, path, raw, send, record, extra, None, False, failed)
            finally:
                upstream.base -= 1
            if outcome is _Outcome.DONE:
                if failed and record.end != "cut":
                    self.fleet.served_elsewhere(rid, failed)
                return
            if outcome is _Outcome.SERVER_ERROR:
                failed.append(rid)
            if len(tried) >= self._attempts:
                raise _all_failed(len(tried), record.engine)
            self._count_retry(record, _reason(outcome))

    async def _to_leader(
        self, peers: Peers, url: str, path: str, raw: bytes, send: Send, record: _Record
    ) -> bool:
        """Relay the request to the router that decides, and its answer back: False when that router
        gave no answer, is shutting down or refused the clients' key, for this router to decide instead."""
        leader = self._leaders.get(url)
        if leader is None:
            key = self._key.decode() if self._key is not None else None
            replica = Replica(id=url, url=url, model="router", limit=1, api_key=key)
            leader = self._leaders[url] = self._upstream(replica)
        record.replica, record.how = url, RELAYED
        headers = [*record.forward, *leader.headers, (VIA, peers.own.encode())]
        try:
            response = await leader.client.post(leader.urls[path], raw, headers)
        except (BusyError, NoAnswerError) as exc:
            peers.gone(url, str(exc))
            return self._decide_here(record)
        try:
            head = b""
            chunks = response.chunks()
            if response.status == 401:
                # This router took the client's key, so the leader was given another one.
                peers.refused(url)
                return self._decide_here(record)
            if response.status == 503:
                try:
                    head = await _head(chunks)
                except CutError:
                    head = b""
                if b'"shutting_down"' in head or not head:
                    peers.gone(url, "it is shutting down" if head else "HTTP 503 without a body")
                    return self._decide_here(record)
            cut = await _pass_on(response, head, chunks, send, record, [])
            if cut is not None:
                peers.gone(url, f"cut mid-answer: {cut}")
            return True
        finally:
            await response.aclose()

    def _decide_here(self, record: _Record) -> bool:
        """The leader did not take the request: this router decides it, counted."""
        self._count_retry(record, "leader_gone")
        record.replica = record.how = None
        return False

    def _none_ready(self, model: str | None) -> bool:
        """Whether every replica of ``model`` (or every replica) is held not ready for adapters."""
        upstreams = self._upstreams.values() if model is None else self._by_model.get(model, ())
        held = self.readiness.not_ready()
        return bool(upstreams) and all(u.replica.id in held for u in upstreams)

    def _least_busy(self, model: str, tried: Collection[str]) -> _Upstream | None:
        """The replica of ``model`` the machine places a base-model request on ([place-base]), not
        tried yet: the least busy, counting this router's base-model requests (its own) beside its
        adapter requests (the fleet's); equal ones take turns. A replica avoided for its adapters alone
        (its runtime LoRA routes or LoRA off) still serves its base model."""
        self._turn += 1
        own = {up.replica.id: up.base for up in self._by_model.get(model, ()) if up.base}
        replica = self.fleet.place_base(
            model, exclude=tried, load=own, turn=self._turn, healthy=self.readiness.lora_only()
        )
        return None if replica is None else self._upstreams.get(replica.id)

    async def _forward(
        self,
        upstream: _Upstream,
        path: str,
        raw: bytes,
        send: Send,
        record: _Record,
        extra: list[tuple[bytes, bytes]],
        lease: Route | None,
        may_retry_missing: bool,
        failed: Sequence[str] = (),
    ) -> _Outcome:
        """Forward the request to ``upstream`` and relay its answer; the outcome says what to do next.

        Args:
            failed: for a request that holds no lease, the replicas that answered it with a server
                error before (a lease knows its own).

        Raises:
            RefusedError: a 502 when the request is to blame for a server error ([blame]).
        """
        upstream.running += 1
        try:
            return await self._relay(
                upstream, path, raw, send, record, extra, lease, may_retry_missing, failed
            )
        finally:
            upstream.running -= 1
            if upstream.retired and not upstream.running:
                await self._close(upstream)

    async def _relay(
        self,
        upstream: _Upstream,
        path: str,
        raw: bytes,
        send: Send,
        record: _Record,
        extra: list[tuple[bytes, bytes]],
        lease: Route | None,
        may_retry_missing: bool,
        failed: Sequence[str],
    ) -> _Outcome:
        replica = upstream.replica
        try:
            headers = [*record.forward, *upstream.headers]
            response = await upstream.client.post(upstream.urls[path], raw, headers)
        except BusyError:
            raise RefusedError(
                503,
                "The router has too many requests open; try again later",
                "router_busy",
                kind="server_error",
            ) from None
        except NoAnswerError as exc:
            self._replica_failed(replica, lease, f"no answer: {exc}")
            return _Outcome.FAULT
        try:
            status = response.status
            head = b""
            chunks = response.chunks()
            if status >= 400:
                try:
                    head = await _head(chunks)
                except CutError as exc:
                    self._replica_failed(replica, lease, f"HTTP {status}, then cut: {exc}")
                    return _Outcome.FAULT
                if status >= 500:
                    message = f"HTTP {status}: {head[:200].decode('utf-8', 'replace')}"
                    if self._request_to_blame(replica, lease, failed, message):
                        raise _engine_failed(status, head)
                    record.engine = status, head
                    return _Outcome.SERVER_ERROR
                if lease is not None and lease.check_answer(status, head) and may_retry_missing:
                    return _Outcome.MISSING
            cut = await _pass_on(response, head, chunks, send, record, extra, lease)
            if cut is not None:
                self._replica_failed(replica, lease, f"cut mid-answer: {cut}")
            return _Outcome.DONE
        finally:
            await response.aclose()

    def _replica_failed(self, replica: Replica, lease: Route | None, message: str) -> None:
        """Tell the fleet ``replica`` failed, so that placement avoids it for a while."""
        if lease is not None:
            lease.replica_failed(message)  # the fleet logs it
        else:
            self.fleet.replica_failed(replica, message)  # a base-model request holds no lease

    def _request_to_blame(
        self, replica: Replica, lease: Route | None, failed: Sequence[str], message: str
    ) -> bool:
        """``replica`` answered with a server error: whether the request is to blame ([blame]), which
        then goes to no other replica."""
        if lease is not None:
            return lease.server_error(message)  # the fleet logs it
        if self.fleet.blame(replica, failed) is Fault.REQUEST:
            log.warning(
                "replica %s answered a base-model request with a server error, as %s did: the request's "
                "fault, not tried again: %s",
                replica.id,
                ", ".join(failed),
                message,
            )
            return True
        log.warning("replica %s answered a base-model request with a server error: %s", replica.id, message)
        return False

    def _count_retry(self, record: _Record, reason: str) -> None:
        record.retries += (reason,)
        if self._metrics is not None:
            self._metrics.retries[reason] += 1

    # -- requests, read -----------------------------------------------------------------------

    def _authorize(self, scope: Scope) -> None:
        key = self._key
        if key is None:
            return
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), key):
                    return
                break
        raise RefusedError(
            401,
            "Incorrect API key provided, or none: send Authorization: Bearer <key>",
            "invalid_api_key",
            headers=((b"www-authenticate", b"Bearer"),),
        )

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        """The request's body, at most ``max_body_bytes`` of it.

        Raises:
            RefusedError: 413 past the bound (the rest of the body read and dropped, see ``_drained``),
                400 for a Content-Length that is no number.
            _ClientGoneError: the client went away first.
        """
        limit = self._max_body
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise RefusedError(
                        400, "The Content-Length header is not a number", "invalid_request"
                    ) from None
                if declared > limit:
                    raise await self._drained(receive, _too_large(limit), declared=declared)
                break
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGoneError
            body: bytes = message.get("body", b"")
            size += len(body)
            more: bool = message.get("more_body", False)
            if size > limit:
                raise await self._drained(receive, _too_large(limit), read=size, more=more)
            chunks.append(body)
            if not more:
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _drained(
        self,
        receive: Receive,
        refusal: RefusedError,
        *,
        read: int = 0,
        more: bool = True,
        declared: int | None = None,
    ) -> RefusedError:
        """``refusal``, to answer once the rest of the request's body is read and dropped.

        A client that sends its whole body before it reads the answer (httpx, most others) gets no
        answer at all when the server closes the connection on a body it did not read: the close
        resets the connection, and the client's write fails before it reads. So the router reads the
        rest, and the connection takes the next request. Past ``_drain`` bytes (or declared past
        them) it stops reading and answers with ``connection: close``: a client that reads as it
        sends gets the answer, one that does not sees the connection reset.

        Args:
            read: bytes of the body read so far; more: whether more follow.
            declared: the body's Content-Length, if it has one.
        """
        if declared is not None and declared > self._drain:
            return _closing(refusal)
        return refusal if await self._drop_body(receive, read=read, more=more) else _closing(refusal)

    async def _drop_body(self, receive: Receive, *, read: int = 0, more: bool = True) -> bool:
        """Read the rest of the request's body and drop it: True when it ended within ``_drain`` bytes.

        Raises:
            _ClientGoneError: the client went away first.
        """
        while more:
            if read > self._drain:
                return False
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGoneError
            read += len(message.get("body", b""))
            more = message.get("more_body", False)
        return True

    # -- the other routes ---------------------------------------------------------------------

    async def _models(self, send: Send) -> int:
        cards: list[dict[str, Any]] = [
            {
                "id": model,
                "object": "model",
                "created": self._created,
                "owned_by": "lorafleet",
                "parent": None,
            }
            for model in sorted(self.catalog.bases)
        ]
        catalog = self.catalog
        for name in catalog.names():
            cards.append(
                {
                    "id": name,
                    "object": "model",
                    "created": self._created,
                    "owned_by": "lorafleet",
                    "parent": catalog.parent(name),
                }
            )
        await respond_json(send, 200, {"object": "list", "data": cards})
        return 200

    def health(self) -> tuple[bool, dict[str, str]]:
        """Whether the router can serve (a replica is ok), and each replica's state by id (see
        ``replica_states``: ``ok``, ``starting``, ``failing: URL: why``, ``not ready: ...``,
        ``draining``, ``drained``)."""
        states = replica_states(
            self.fleet,
            self.readiness,
            (u.replica for u in self._upstreams.values()),
            (u.replica for u in self._retired.values()),
            self.drained,
        )
        return "ok" in states.values(), states

    async def _health(self, send: Send) -> int:
        ok, states = self.health()
        status = 200 if ok and not self.stopping else 503
        said = "shutting down" if self.stopping else "ok" if ok else "unavailable"
        body: dict[str, object] = {"status": said, "replicas": states}
        if self.peers is not None and self.peers.configured:
            # What the peers choose the router that decides by (``_peers.leader_of``).
            body["router"], body["up_since"] = self.peers.own, self.peers.up_since
        await respond_json(send, status, body)
        return status

    async def _metrics_page(self, send: Send) -> int:
        if self._registry is None:
            raise RefusedError(404, "This router exports no metrics", "not_found")
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        body = generate_latest(self._registry)
        await respond(send, 200, body, [(b"content-type", CONTENT_TYPE_LATEST.encode())])
        return 200


async def _head(chunks: AsyncIterator[bytes]) -> bytes:
    """The first ``ERROR_HEAD_BYTES`` or so of an error's body, the rest left in ``chunks``. Raises
    ``CutError``."""
    head = b""
    async for chunk in chunks:
        head += chunk
        if len(head) >= ERROR_HEAD_BYTES:
            break
    return head


async def _pass_on(
    response: Answer,
    head: bytes,
    chunks: AsyncIterator[bytes],
    send: Send,
    record: _Record,
    extra: list[tuple[bytes, bytes]],
    lease: Route | None = None,
) -> CutError | None:
    """Relay an answer to the client, ``head`` (what of its body was read) first: None once it went
    whole, else what cut it.

    ``lease`` is released as soon as the replica has sent its answer's last byte (its Content-Length
    reached, or the body's end), before the router sends that last part on: the engine is done with
    the adapter then. The time the client takes over that part (all of an answer that came in one
    piece) would otherwise keep the adapter in use, from eviction and from the requests waiting at
    the cap for one to go idle.
    """
    headers = relayed(response.headers, record.request_id)
    headers.extend(extra)
    record.status = response.status
    left = _content_length(response.headers)
    if left is not None:
        left -= len(head)
        if left <= 0 and lease is not None:
            lease.release()
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    if head:
        record.first = time.perf_counter()
        await send({"type": "http.response.body", "body": head, "more_body": True})
    try:
        async for chunk in chunks:
            if not record.first:
                record.first = time.perf_counter()
            if left is not None:
                left -= len(chunk)
                if left <= 0 and lease is not None:
                    lease.release()
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except CutError as exc:
        # Too late to go elsewhere: the client has part of the answer. Ending without the last
        # message makes the server close the connection, so the client sees it cut short.
        record.end = "cut"
        return exc
    if lease is not None:
        lease.release()
    record.answered = True
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    return None


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """An answer's Content-Length, or None: none (chunked, a stream), or not a number."""
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class _ClientGoneError(Exception):
    """The client went away before its request was read."""


BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Upper bounds, in seconds, of the request latency histogram's buckets."""


class _Metrics:
    """The router's own metrics, beside the fleet's: counted in plain ints on the request's path and
    exported when Prometheus scrapes (prometheus-client's metric objects take a lock per update).

    - ``lorafleet_serve_requests_total{route,status}``: completion requests answered (status 0: the
      client went away before an answer began);
    - ``lorafleet_serve_request_seconds{route}``: a histogram, from arrival to the last byte relayed;
    - ``lorafleet_serve_retries_total{reason}``: requests placed again (``replica_failed``: no
      answer; ``server_error``: a 5xx, the replica's fault; ``adapter_missing``; ``leader_gone``: the
      router it relays to gave no answer);
    - ``lorafleet_serve_requests_in_flight``: completion requests being served;
    - with peers: ``lorafleet_serve_peers_ready``, the routers ready at the last look, and
      ``lorafleet_serve_relaying``, 1 while this router relays to another (over all routers, the sum
      of ``1 - relaying`` is how many decide: 1 but for a moment).
    """

    def __init__(self, registry: CollectorRegistry, peers: Peers | None = None) -> None:
        self._peers = peers
        self.in_flight = 0
        self.requests: Counter[tuple[str, int]] = Counter()
        self.retries: Counter[str] = Counter({"replica_failed": 0, "server_error": 0, "adapter_missing": 0})
        self.buckets: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}
        registry.register(self)

    def answered(self, route: str, status: int, seconds: float) -> None:
        self.requests[route, status] += 1
        counts = self.buckets.get(route)
        if counts is None:
            counts = self.buckets[route] = [0] * (len(BUCKETS) + 1)
        counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.sums[route] = self.sums.get(route, 0.0) + seconds

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        requests = CounterMetricFamily(
            "lorafleet_serve_requests",
            "Completion requests answered, by route and status (0: the client went away first)",
            labels=["route", "status"],
        )
        for (route, status), count in sorted(self.requests.items()):
            requests.add_metric([route, str(status)], count)
        seconds = HistogramMetricFamily(
            "lorafleet_serve_request_seconds",
            "Completion requests, from arrival to the last byte relayed",
            labels=["route"],
        )
        for route, counts in sorted(self.buckets.items()):
            cumulative = list(itertools.accumulate(counts))
            bounds = [*(repr(float(b)) for b in BUCKETS), "+Inf"]
            seconds.add_metric([route], list(zip(bounds, cumulative, strict=True)), self.sums[route])
        retries = CounterMetricFamily(
            "lorafleet_serve_retries",
            "Requests placed again: a replica gave no answer, answered a 5xx, or had lost the adapter; "
            "or the router this one relays to gave no answer",
            labels=["reason"],
        )
        for reason, count in sorted(self.retries.items()):
            retries.add_metric([reason], count)
        in_flight = GaugeMetricFamily(
            "lorafleet_serve_requests_in_flight", "Completion requests being served", value=self.in_flight
        )
        families = [requests, seconds, retries, in_flight]
        peers = self._peers
        if peers is not None and peers.configured:
            families.append(
                GaugeMetricFamily(
                    "lorafleet_serve_peers_ready",
                    "Routers ready at the last look at the peers",
                    value=len(peers.live),
                )
            )
            families.append(
                GaugeMetricFamily(
                    "lorafleet_serve_relaying",
                    "1 while this router relays its requests to the peer that decides, 0 while it decides",
                    value=int(peers.leader is not None),
                )
            )
        return families


def _model_of(raw: bytes) -> tuple[str, bool]:
    """The ``model`` a request's body names, and whether it asks for a stream."""
    try:
        body = json.loads(raw)
    except ValueError:
        raise RefusedError(400, "The body is not valid JSON", "invalid_json") from None
    if not isinstance(body, dict):
        raise RefusedError(400, "The body must be a JSON object", "invalid_request")
    model = body.get("model")
    if model is None:
        raise RefusedError(400, "You must provide a model parameter.", "missing_model", param="model")
    if not isinstance(model, str) or not model:
        raise RefusedError(
            400, "The model parameter must be a non-empty string", "invalid_model", param="model"
        )
    return model, body.get("stream") is True


def _reason(outcome: _Outcome) -> str:
    """The retry a fault or a server error makes, as ``lorafleet_serve_retries_total`` counts it."""
    return "server_error" if outcome is _Outcome.SERVER_ERROR else "replica_failed"


def _too_large(limit: int) -> RefusedError:
    return RefusedError(
        413, f"The request body is larger than this router takes ({limit} bytes)", "request_too_large"
    )


def _closing(refusal: RefusedError) -> RefusedError:
    """``refusal``, answered with ``connection: close``: the server closes the connection after it."""
    return RefusedError(
        refusal.status,
        refusal.message,
        refusal.code,
        kind=refusal.kind,
        param=refusal.param,
        headers=(*refusal.headers, (b"connection", b"close")),
    )


def _all_failed(tried: int, engine: tuple[int, bytes] | None) -> RefusedError:
    """The 502 for a request no replica served: with what the engine said when one answered a 5xx."""
    failed = f"The request failed on {tried} replica{'s' if tried != 1 else ''}"
    if engine is None:
        return RefusedError(502, f"{failed}; try again later", "replica_failed", kind="server_error")
    status, head = engine
    said = _engine_message(head)
    return RefusedError(
        502,
        f"{failed}; one answered it with a server error (HTTP {status}){f': {said}' if said else ''}",
        "replica_failed",
        kind="server_error",
        headers=((b"x-lorafleet-engine-status", str(status).encode()),),
    )


def _engine_failed(status: int, head: bytes) -> RefusedError:
    """The 502 for a request that makes engines fail ([blame]): the engine's status and what it said."""
    said = _engine_message(head)
    return RefusedError(
        502,
        f"The engines answered this request with a server error on two replicas (the last: HTTP {status}); "
        f"it is not tried again{f'. The engine said: {said}' if said else ''}",
        "engine_error",
        kind="server_error",
        headers=((b"x-lorafleet-engine-status", str(status).encode()),),
    )


def _engine_message(head: bytes, most: int = 300) -> str:
    """The message of an engine's error answer (vLLM's ``{"error": {"message"}}``, older
    ``{"message"}``, FastAPI's ``{"detail"}``, or plain text), on one line, at most ``most`` characters."""
    text = head.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        found = error.get("message") if isinstance(error, dict) else error
        if not isinstance(found, str):
            found = body.get("message", body.get("detail"))
        if isinstance(found, str):
            text = found
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 3] + "..."


async def _watch_for_disconnect(receive: Receive, scope: anyio.CancelScope, record: _Record) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not record.answered:
                record.end = "client_gone"
                scope.cancel()
            return


__all__ = ["JSON", "Router"]
