"""The routers sharing these replicas, and which of them decides for all (issue 33).

Routers that each decide see one another only through the engines, late by a read at best, so each
loads and evicts on a picture the others are changing: three such routers load more and wait longer
than one (docs/routers.md). So when a router is told its peers (``[peers]``: their URLs, or a name
whose addresses they are), one of them decides and the others relay their routed requests to it as
they came. The one that decides is the ready router up the longest (the earliest ``up_since`` on
its ``/health``, then the smallest id): every router sees the same answers, so they agree on it
without talking of it, and one that restarts does not take the lead back from a router whose view of
the engines is warm.

Each router looks at every peer's ``/health`` every ``interval`` seconds. A leader that does not
answer a relayed request is taken for gone until a look finds it ready again, and a look follows at
once; the request is decided here, with this router's own fleet. While a router relays, its fleet
stands by: it lists the engines at the listing interval rather than the shared one, and all at once
when the router decides again ([standby]). A request relayed once is never relayed again
(``_headers.VIA``), so routers whose looks disagree for a moment each decide, as routers without
peers do.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Callable, Sequence

import anyio
import attrs
import httpx

from . import _dns

log = logging.getLogger("lorafleet.serve")

HEALTH_TIMEOUT = 1.0
"""Seconds a peer's ``/health`` may take before the peer counts as not ready."""


@attrs.frozen
class Peer:
    """A router as a look at its ``/health`` found it."""

    url: str
    router: str
    """Its id (``Peers.own``), new at each start."""
    up_since: float


def leader_of(ready: Sequence[Peer]) -> Peer | None:
    """The router that decides among the ``ready`` ones: up the longest, then the smallest id."""
    return min(ready, key=lambda p: (p.up_since, p.router), default=None)


class Peers:
    """This router's peers, looked at every ``interval`` seconds; ``leader`` is where to relay to.
    None configured: this router decides.

    Args:
        client: what asks the peers' ``/health``.
        relaying: told True when this router starts relaying to a leader, False when it decides again
            (the fleet's ``stand_by``).
    """

    def __init__(self, client: httpx.AsyncClient, relaying: Callable[[bool], None] | None = None) -> None:
        self.own = secrets.token_hex(8)
        """This router's id, on its ``/health``: how it knows itself among the peers."""
        self.up_since = time.time()
        self._client = client
        self._urls: tuple[str, ...] = ()
        self._dns: str | None = None
        self._port = 8000
        self.interval = 0.5
        self._wake = anyio.Event()
        """Set to look again at once: a new configuration, or a leader gone."""
        self.leader: str | None = None
        """The URL to relay routed requests to (None: this router decides); set by ``_follow``."""
        self._relaying = relaying
        self.live: tuple[Peer, ...] = ()
        """The ready routers at the last look, this one included when it found itself."""
        self._said: tuple[str | None, int] | None = None
        self._dns_failure: str | None = None
        self._gone = 0
        """Leaders found gone so far: a look that began before the last one is stale."""
        self._refused: set[str] = set()
        """Peers that refused this router's relayed requests (another clients' key): never its leader
        until the peers are configured again."""

    def configure(
        self, *, urls: Sequence[str] = (), dns: str | None = None, port: int = 8000, interval: float = 0.5
    ) -> None:
        """Which routers are the peers from the next look on.

        Args:
            urls: the peers' root URLs (this router's own among them).
            dns: a name whose addresses are the peers, each at ``port``; resolved at every look.
        """
        self._urls = tuple(u.rstrip("/") for u in urls)
        self._dns, self._port, self.interval = dns, port, interval
        self._refused.clear()
        self._wake.set()

    @property
    def configured(self) -> bool:
        """Whether this router has peers: only then does its ``/health`` show its id, so that a router
        without is never chosen to decide for others."""
        return bool(self._urls) or self._dns is not None

    def gone(self, url: str, why: str) -> None:
        """The leader at ``url`` gave no answer: decide here until a look finds it ready again, and look
        at once."""
        if self.leader == url:
            log.warning(
                "peers: the leader %s gave no answer (%s): this router decides until it is back", url, why
            )
            self._drop()

    def refused(self, url: str) -> None:
        """The leader at ``url`` refused the clients' key this router took: they were given different
        keys. Said once; that router leads this one no more, until the peers are configured again."""
        if url not in self._refused:
            self._refused.add(url)
            log.error(
                "peers: %s refused a request this router relayed with its clients' key (401): give every "
                "router the same server.api_key_env key; this router does not relay to it until the "
                "settings are read again",
                url,
            )
        if self.leader == url:
            self._drop()

    def _follow(self, leader: str | None) -> None:
        """Relay to ``leader`` from now on (None: decide here), and say so when that turns."""
        was, self.leader = self.leader, leader
        if (was is None) != (leader is None) and self._relaying is not None:
            self._relaying(leader is not None)

    def _drop(self) -> None:
        self._follow(None)
        # The next leader is named by a look: the sooner, the shorter the time two routers decide.
        self._gone += 1
        self._wake.set()

    async def run(self) -> None:
        """Look at the peers every ``interval`` seconds, for ever."""
        while True:
            self._wake = anyio.Event()
            await self.look()
            with anyio.move_on_after(self.interval):
                await self._wake.wait()

    async def look(self) -> None:
        """Ask every peer's ``/health``, then take the leader it shows (unless a leader was found gone
        meanwhile: the look that woke for it says)."""
        gone = self._gone
        urls = list(self._urls)
        if not urls and self._dns is None:
            if self.leader is not None or self.live:
                self._follow(None)
                self.live = ()
                log.info("peers: none; this router decides")
            self._said = None
            return
        if self._dns is not None:
            try:
                found = await _dns.system_addresses(self._dns, self._port, HEALTH_TIMEOUT)
            except _dns.DnsError as exc:
                # Said once, not at every look: again only once it resolves, or fails otherwise.
                if str(exc) != self._dns_failure:
                    log.warning("peers: %s; the peers it gave are not asked until it resolves", exc)
                self._dns_failure = str(exc)
                found = []
            else:
                if self._dns_failure is not None:
                    log.info("peers: %s resolves again", self._dns)
                self._dns_failure = None
            urls += [f"http://{_dns.host_port(a, self._port)}" for a in found]
        answers: list[Peer | None] = [None] * len(urls)

        async def ask(i: int, url: str) -> None:
            answers[i] = await self._health(url)

        async with anyio.create_task_group() as tasks:
            for i, url in enumerate(dict.fromkeys(urls)):
                tasks.start_soon(ask, i, url)
        if self._gone != gone:
            return
        ready = [p for p in answers if p is not None and p.url not in self._refused]
        self.live = tuple(ready)
        leader = leader_of(ready)
        self._follow(None if leader is None or leader.router == self.own else leader.url)
        said = (self.leader, len(ready))
        if said != self._said:
            self._said = said
            who = (
                "this router decides" if self.leader is None else f"{self.leader} decides, this router relays"
            )
            log.info("peers: %d ready; %s", len(ready), who)

    async def _health(self, url: str) -> Peer | None:
        """``url``'s router, when its ``/health`` says it is ready."""
        try:
            answer = await self._client.get(f"{url}/health", timeout=HEALTH_TIMEOUT)
            body = answer.json() if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(body, dict):
            return None
        router, up_since = body.get("router"), body.get("up_since")
        if not isinstance(router, str) or not isinstance(up_since, int | float):
            return None
        if not math.isfinite(up_since):
            return None
        return Peer(url, router, float(up_since))
