"""The operator's interface: where each adapter is and why it failed, and the operator's hand on the fleet.

It listens on a port of its own (``admin.port``; 127.0.0.1 unless ``admin.host`` says otherwise) and
always wants a key of its own (``admin.api_key_env``), for three reasons (docs/admin.md):

- off the clients' path: the clients' Service or load balancer never reaches it, and on 127.0.0.1 only
  what runs on the host (in a pod, ``kubectl port-forward``) does;
- one router at a time: what it shows and does is this router's fleet, so an operator addresses each
  router (pod) on its own, which a port behind the clients' Service would not let them do;
- a client's key drains nothing: the clients' key never opens it, and it never opens a completion.

Every answer is JSON; every error is OpenAI-shaped (``{"error": {"message", "type", "param", "code"}}``)
and changes nothing. Every action goes through the fleet, which hands it to the machine as an event:
forgetting a refusal is ``RefusalForgotten`` ([forgive]); reloading an adapter everywhere is
``AdapterChanged`` ([renew]: no copy loaded before is granted again, idle ones are unloaded at once
and the rest after their last request, and its next request loads its files anew); draining a
replica removes it from the fleet (``ReplicasRemoved``: requests running there finish on their
leases, those waiting there are placed elsewhere, nothing is unloaded), and undraining adds it back
(``ReplicaAdded``, its listing read afresh).

(``ReplicaAdded``, its listing read afresh); unloading an adapter from a replica is
``AdapterDismissed`` ([dismiss]), which the machine refuses (``NotIdleError``, a 409 here) unless the
adapter is idle there: nothing is unloaded under a request, pinned, loading or going.

What an adapter's view shows of the machine is its queries': its demand (``demand``, the decayed
count placement weighs) and the refusal in force (``refusal``), beside the fleet's own records.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Protocol

import anyio
import sniffio
from hypercorn.config import Config as HypercornConfig

from lorafleet import Statistics
from lorafleet_fleet import NotIdleError, Replica, UnknownReplicaError

from ._app import Router
from ._catalog import Fingerprint, fingerprint
from ._keys import require
from ._openai import JSON, Receive, RefusedError, Scope, Send, lifespan, refuse, respond, want_method

log = logging.getLogger("lorafleet.serve")

ADAPTER_ACTIONS = ("forget-refusal", "reload")
"""What ``POST /adapters/NAME/ACTION`` does; each is one call to the fleet in ``Admin._adapter_action``."""
REPLICA_ACTIONS = ("drain", "undrain")
"""What ``POST /replicas/ID/ACTION`` does."""


class Operated(Protocol):
    """What the admin interface operates: ``RouterServer``."""

    @property
    def router(self) -> Router: ...

    def replicas_known(self) -> dict[str, Replica]:
        """Every replica the configuration and the discovered names give now, drained ones too."""

    @property
    def drained(self) -> frozenset[str]: ...

    async def drain(self, replica: str) -> bool:
        """Take ``replica`` out of the fleet: True when it was in. Raises LookupError for an unknown id."""

    async def undrain(self, replica: str) -> bool:
        """Put ``replica`` back: True when it was drained. Raises LookupError for an unknown id."""


class Admin:
    """The admin interface, an ASGI app (``serve_admin`` serves it on its own socket).

    Routes (all want ``Authorization: Bearer <admin key>`` but ``GET /live``):

    - ``GET /adapters``: every adapter the fleet holds, loads, unloads, pins or warms, that failed to
      load, or that the adapters' table names; ``GET /adapters/NAME``: any adapter the router serves;
    - ``POST /adapters/NAME/forget-refusal``: the engines' refusal of it is forgotten, its next request
      asks one again;
    - ``GET /replicas``, ``GET /replicas/ID``: each replica's state, what it holds, what failed there;
    - ``POST /replicas/ID/drain``: no new request goes there, those running there finish;
      ``POST /replicas/ID/undrain``: it takes requests again;
    - ``POST /replicas/ID/adapters/NAME/unload``: the replica unloads the adapter now, if it is idle
      there (else 409, and nothing changes);
    - ``GET /live``: 200 while the router's event loop answers (a liveness probe; no key, no data).
    """

    def __init__(self, operated: Operated, key: str) -> None:
        self._operated = operated
        self._key = key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method: str = scope["method"]
        path: str = scope["path"]
        status = 0
        try:
            await _drop_body(receive)
            if path == "/live":
                want_method(method, "GET", path)
                status = 200
                await _answer(send, 200, {"status": "alive"})
                return
            require(scope, self._key, "The admin interface")
            status, body = await self._route(method, path)
            await _answer(send, status, body)
        except RefusedError as refusal:
            status = refusal.status
            await refuse(send, refusal)
        except _GoneError:
            return
        finally:
            if method != "GET" and path != "/live":
                log.info("admin: %s %s: %d", method, path, status)

    async def _route(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        parts = [p for p in path.split("/") if p]
        match parts:
            case ["adapters"]:
                want_method(method, "GET", path)
                return 200, {"adapters": self._adapters()}
            case ["adapters", name]:
                want_method(method, "GET", path)
                return 200, self._adapter(name)
            case ["adapters", name, action] if action in ADAPTER_ACTIONS:
                want_method(method, "POST", path)
                return 200, self._adapter_action(name, action)
            case ["replicas"]:
                want_method(method, "GET", path)
                return 200, {"replicas": self._replicas()}
            case ["replicas", rid]:
                want_method(method, "GET", path)
                return 200, self._replica(rid)
            case ["replicas", rid, action] if action in REPLICA_ACTIONS:
                want_method(method, "POST", path)
                return 200, await self._replica_action(rid, action)
            case ["replicas", rid, "adapters", name, "unload"]:
                want_method(method, "POST", path)
                return 200, self._unload(rid, name)
        raise RefusedError(
            404, f"Invalid URL ({method} {path}): see GET /adapters and GET /replicas", "not_found"
        )

    # -- adapters ---------------------------------------------------------------------------------

    def _adapters(self) -> dict[str, Any]:
        router = self._operated.router
        fleet = router.fleet
        stats = fleet.statistics()
        names: set[str] = set(router.catalog.table_names())
        names.update(stats.pins)
        names.update(stats.warming)
        for replica in stats.replicas.values():
            names.update(replica.held, replica.loading, replica.unloading)
        names.update(fleet.load_failures())
        counts = fleet.adapter_statistics(top=None).adapters
        return {name: self._view(name, stats, counts.get(name)) for name in sorted(names)}

    def _adapter(self, name: str) -> dict[str, Any]:
        fleet = self._operated.router.fleet
        self._folder(name)
        counts = fleet.adapter_statistics(top=None).adapters.get(name)
        return {"adapter": name, **self._view(name, fleet.statistics(), counts)}

    def _folder(self, name: str) -> str:
        folder = self._operated.router.catalog.path(name)
        if folder is None:
            raise RefusedError(
                404,
                f"No adapter `{name}`: this router serves no adapter of that name (GET /adapters lists "
                "those it knows of)",
                "unknown_adapter",
            )
        return folder

    def _view(self, name: str, stats: Statistics, counts: Any) -> dict[str, Any]:
        router = self._operated.router
        fleet = router.fleet
        folder = router.catalog.path(name)
        held: dict[str, int] = {}
        loading: list[str] = []
        unloading: list[str] = []
        for rid, replica in stats.replicas.items():
            if name in replica.unloading:
                unloading.append(rid)  # an old copy, or a victim: no request is granted it
            elif name in replica.held:
                held[rid] = replica.held[name]
            if name in replica.loading:
                loading.append(rid)
        failure = fleet.load_failures().get(name)
        now = anyio.current_time()
        refusal = fleet.refusal(name)
        return {
            "folder": folder,
            "model": router.catalog.model(name),
            "held": held,
            "in_use": sum(held.values()),
            "loading": loading,
            "unloading": unloading,
            "pinned": stats.pins.get(name),
            "warming": name in stats.warming,
            "requests": counts.requests if counts is not None else 0,
            "demand": fleet.demand(name),
            "refusal": None
            if refusal is None
            else {"message": refusal.message, "seconds_left": round(refusal.until - now, 1)},
            "last_load_error": None
            if failure is None
            else {
                "replica": failure.replica,
                "outcome": failure.outcome.value,
                "message": failure.message,
                "seconds_ago": round(now - failure.at, 1),
            },
            "fingerprint": _fingerprint(fingerprint(folder)) if folder is not None else None,
        }

    def _adapter_action(self, name: str, action: str) -> dict[str, Any]:
        """One of ``ADAPTER_ACTIONS`` on a served adapter, through the fleet; its view after."""
        self._folder(name)
        router = self._operated.router
        if action == "forget-refusal":
            router.forget_refusal(name)  # [forgive]
            log.info("admin: adapter %r: its refusal is forgotten; its next request asks an engine", name)
        elif action == "reload":
            router.adapter_changed(name)  # [renew]; its own line in the log says so
        return self._adapter(name)

    def _unload(self, rid: str, name: str) -> dict[str, Any]:
        """[dismiss] ``name`` from replica ``rid``, through the fleet: the replica's view after."""
        self._folder(name)
        try:
            self._operated.router.dismiss(rid, name)
        except UnknownReplicaError:
            known = self._operated.replicas_known()
            if rid in known or rid in self._operated.drained:  # drained: out of the fleet
                raise RefusedError(
                    409,
                    f"Replica `{rid}` is not in the fleet now: it holds nothing to unload",
                    "not_in_fleet",
                ) from None
            raise _unknown_replica(rid, known) from None
        except NotIdleError as refused:
            raise RefusedError(
                409,
                f"Adapter `{name}` is not unloaded from `{rid}`: {refused.reason}; nothing changed",
                "adapter_not_idle",
            ) from None
        return self._replica(rid)

    # -- replicas ---------------------------------------------------------------------------------

    def _replicas(self) -> dict[str, Any]:
        known = self._operated.replicas_known()
        _, states = self._operated.router.health()
        ids = sorted(set(known) | set(states) | set(self._operated.drained))
        return {rid: self._replica_view(rid, known.get(rid), states) for rid in ids}

    def _replica(self, rid: str) -> dict[str, Any]:
        known = self._operated.replicas_known()
        _, states = self._operated.router.health()
        if rid not in known and rid not in states and rid not in self._operated.drained:
            raise _unknown_replica(rid, known)
        return {"replica": rid, **self._replica_view(rid, known.get(rid), states)}

    def _replica_view(self, rid: str, replica: Replica | None, states: Mapping[str, str]) -> dict[str, Any]:
        fleet = self._operated.router.fleet
        stats = fleet.replica_statistics(rid)
        failure = fleet.failure(rid)
        now = anyio.current_time()
        return {
            "url": replica.url if replica is not None else None,
            "model": replica.model if replica is not None else None,
            "limit": replica.limit if replica is not None else None,
            "state": states.get(rid, "drained" if rid in self._operated.drained else "removed"),
            "drained": rid in self._operated.drained,
            "held": dict(stats.held) if stats is not None else {},
            "loading": list(stats.loading) if stats is not None else [],
            "unloading": list(stats.unloading) if stats is not None else [],
            "in_flight": stats.in_flight if stats is not None else 0,
            "queued": stats.queued if stats is not None else 0,
            "last_failure": None
            if failure is None
            else {
                "url": failure.url,
                "message": failure.message,
                "failed_reads": failure.failed_reads,
                "seconds_ago": round(now - failure.at, 1),
            },
        }

    async def _replica_action(self, rid: str, action: str) -> dict[str, Any]:
        operated = self._operated
        known = operated.replicas_known()
        if rid not in known and rid not in operated.drained:
            raise _unknown_replica(rid, known)
        try:
            changed = await (operated.drain(rid) if action == "drain" else operated.undrain(rid))
        except LookupError:
            raise _unknown_replica(rid, operated.replicas_known()) from None
        return {**self._replica(rid), "changed": changed}


def _unknown_replica(rid: str, known: Collection[str]) -> RefusedError:
    listed = ", ".join(repr(k) for k in sorted(known)) or "none"
    return RefusedError(404, f"No replica `{rid}` (this router's: {listed})", "unknown_replica")


def _fingerprint(found: Fingerprint) -> dict[str, Any] | None:
    """A folder's fingerprint as an operator reads it: its files, their bytes, the newest time, and a
    digest of them all (what changes when any file's size or time does)."""
    if found is None:
        return None
    newest = max((mtime for _, _, mtime in found), default=0)
    return {
        "files": len(found),
        "bytes": sum(size for _, size, _ in found),
        "modified": datetime.datetime.fromtimestamp(newest / 1e9, datetime.UTC).isoformat(timespec="seconds")
        if found
        else None,
        "digest": hashlib.sha256(repr(found).encode()).hexdigest()[:16],
    }


class _GoneError(Exception):
    """The client went away before its request was read."""


async def _drop_body(receive: Receive) -> None:
    """Read the request's body (the routes take none) and drop it, up to 64 KiB."""
    read = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _GoneError
        read += len(message.get("body", b""))
        if read > 64 << 10:
            raise RefusedError(413, "The admin interface takes no request body", "request_too_large")
        if not message.get("more_body", False):
            return


async def _answer(send: Send, status: int, data: Any) -> None:
    body = json.dumps(data, indent=2, ensure_ascii=False).encode() + b"\n"
    await respond(send, status, body, [JSON])


async def serve_admin(app: Admin, sock: socket.socket, stopped: Callable[[], Awaitable[None]]) -> None:
    """Serve ``app`` on ``sock`` with hypercorn until ``stopped()`` returns, under asyncio or trio."""
    config = HypercornConfig()
    config.bind = [f"fd://{sock.detach()}"]
    config.graceful_timeout = 1.0  # nothing here runs long
    config.accesslog = None  # actions are logged in words, and reads are not worth a line
    config.errorlog = logging.getLogger("lorafleet.serve.hypercorn")
    config.include_server_header = False
    if sniffio.current_async_library() == "trio":
        from hypercorn.trio import serve as serve_trio

        await serve_trio(app, config, shutdown_trigger=stopped)  # type: ignore[arg-type]
    else:
        from hypercorn.asyncio import serve as serve_asyncio

        await serve_asyncio(app, config, shutdown_trigger=stopped)  # type: ignore[arg-type]
