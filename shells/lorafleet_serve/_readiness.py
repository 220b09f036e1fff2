"""Which replicas cannot take adapters, as the router saw them answer, and the fix in serve's words.

A replica answers a misconfiguration the same way every time: a 401 (the key), the runtime LoRA
routes absent (``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` unset), "LoRA is not enabled" (no
``--enable-lora``). The fleet reads such an answer as the replica failing, and avoids it for a while
before it tries again; clients meanwhile get 503s that say "try again later". So the router watches
the fleet's own calls (an httpx event hook on its client: no call is added) and holds a replica
"not ready" from such an answer until an answer from it says otherwise: a load that succeeds, a
listing that succeeds (for the key), or, for absent routes, a GET of the load route answered 405
(``recheck``, which the router makes for those replicas only).

This is the router's view of its replicas' readiness; which adapter goes where stays the fleet's.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping

import attrs
import httpx

from lorafleet import IssueLoad, ListingFailed, ReadListing, vllm
from lorafleet.vllm._answers import LORA_DISABLED_HINT, ROUTES_ABSENT, UNAUTHORIZED, WRONG_URL
from lorafleet_fleet import Replica

log = logging.getLogger("lorafleet.serve")

LOAD_PATH = "/v1/load_lora_adapter"
LISTING_PATH = "/v1/models"
MAX_READ = 64 << 10
"""An answer longer than this is no misconfiguration's: its body is left to the fleet, unread here."""


class Problem(enum.Enum):
    KEY = "key"
    """A 401: the key is wrong, or missing."""
    URL = "url"
    """No /v1/models: the URL is not a vLLM server's root."""
    ROUTES = "routes"
    """The runtime LoRA routes are absent."""
    LORA = "lora"
    """LoRA is not enabled."""


@attrs.frozen
class Origin:
    """Where a replica comes from in the configuration, as messages name it."""

    where: str
    """``replicas[0] ('gpu-0')``, ``discover[1] ('vllm.ns.svc')``..."""
    api_key_env: str | None = None


class Readiness:
    """The replicas the router saw answer with a misconfiguration, and what fixes each."""

    def __init__(self) -> None:
        self._problems: dict[str, Problem] = {}
        self._origins: dict[str, Origin] = {}
        self._by_url: dict[str, list[Replica]] = {}

    def track(self, replicas: Iterable[Replica], origins: Mapping[str, Origin]) -> None:
        """Watch the calls to ``replicas`` from now on; forget what was seen of the others (and of a
        replica that moved to another server or key: another server, as far as anyone knows)."""
        now = {r.id: r for r in replicas}
        known = {r.id: r for rs in self._by_url.values() for r in rs}
        for rid in list(self._problems):
            old, new = known.get(rid), now.get(rid)
            if new is None or old is None or (old.url, old.api_key) != (new.url, new.api_key):
                del self._problems[rid]
        self._by_url = {}
        for replica in now.values():
            self._by_url.setdefault(replica.url, []).append(replica)
        self._origins = dict(origins)

    def fix(self, replica: str) -> str | None:
        """Why ``replica`` cannot take adapters and how to fix it, or None when nothing says so."""
        problem = self._problems.get(replica)
        return None if problem is None else self._words(replica, problem)

    def lora_only(self) -> frozenset[str]:
        """The replicas whose only fault is adapters (their routes or LoRA are off): their base
        model they serve still."""
        return frozenset(rid for rid, p in self._problems.items() if p in (Problem.ROUTES, Problem.LORA))

    def not_ready(self, problem: Problem | None = None) -> list[str]:
        """The replicas held not ready (for ``problem``, or any), by id."""
        return sorted(rid for rid, p in self._problems.items() if problem is None or p is problem)

    async def on_response(self, response: httpx.Response) -> None:
        """The fleet's client's response hook: read what a listing's or a load's answer says."""
        request = response.request
        url = str(request.url)
        status = response.status_code
        for path, method in ((LISTING_PATH, "GET"), (LOAD_PATH, "POST")):
            if url.endswith(path) and request.method == method:
                break
        else:
            return
        replicas = self._by_url.get(url.removesuffix(path), ())
        if not replicas:
            return
        if status == 200:
            for replica in replicas:
                self._clear(replica.id, None if path == LOAD_PATH else (Problem.KEY, Problem.URL))
            return
        if status >= 400 and int(response.headers.get("content-length") or MAX_READ + 1) <= MAX_READ:
            await response.aread()  # the fleet reads the same bytes after
            body = response.content
        else:
            body = b""
        for replica in replicas:
            if path == LISTING_PATH:
                listing = vllm.answer_event(ReadListing(listing=0, replica=replica.id), status, body)
                message = listing.message if isinstance(listing, ListingFailed) else ""
            else:
                command = IssueLoad(load=0, replica=replica.id, adapter="", path="")
                message = vllm.answer_event(command, status, body).message
            problem = _problem(message)
            if problem is not None:
                self._hold(replica.id, problem)

    async def recheck(self, client: httpx.AsyncClient, replica: Replica, timeout: float) -> None:
        """Ask a replica held not ready for absent routes whether it has them now: a GET of the load
        route is answered 405 where the route exists, 404 where it does not, 401 without the key.
        It changes nothing on the replica."""
        headers = {"Authorization": f"Bearer {replica.api_key}"} if replica.api_key else {}
        try:
            answer = await client.get(replica.url + LOAD_PATH, headers=headers, timeout=timeout)
        except httpx.HTTPError:
            return  # no answer: the fleet's own calls say it is failing
        if answer.status_code == 405:
            self._clear(replica.id, (Problem.ROUTES,))
        elif answer.status_code == 401:
            self._hold(replica.id, Problem.KEY)

    def _hold(self, rid: str, problem: Problem) -> None:
        if self._problems.get(rid) is problem:
            return
        self._problems[rid] = problem
        log.warning("replica %s is not ready: %s", rid, self._words(rid, problem))

    def _clear(self, rid: str, problems: tuple[Problem, ...] | None) -> None:
        """An answer says ``rid`` no longer has ``problems`` (None: none at all)."""
        held = self._problems.get(rid)
        if held is None or (problems is not None and held not in problems):
            return
        del self._problems[rid]
        log.info("replica %s is ready: it answered as a replica that takes adapters does", rid)

    def _words(self, rid: str, problem: Problem) -> str:
        origin = self._origins.get(rid, Origin(f"replica {rid!r}"))
        if problem is Problem.ROUTES:
            return (
                "vLLM's runtime LoRA routes are absent: start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
                "in its environment"
            )
        if problem is Problem.LORA:
            return "LoRA is not enabled on this vLLM: start it with --enable-lora"
        if problem is Problem.URL:
            return (
                "it has no /v1/models, which every vLLM server has: give its root URL "
                f"(http://host:port, without /v1) in {origin.where}"
            )
        if origin.api_key_env is None:
            return (
                "vLLM wants a key (401): put its --api-key in an environment variable and name the variable "
                f"with api_key_env in {origin.where}"
            )
        return (
            f"vLLM refused the key (401): set ${origin.api_key_env} (api_key_env of {origin.where}) to the "
            "key vLLM was started with (--api-key)"
        )


def _problem(message: str) -> Problem | None:
    """The misconfiguration the core's message for an answer names, if any."""
    if message == UNAUTHORIZED:
        return Problem.KEY
    if message == ROUTES_ABSENT:
        return Problem.ROUTES
    if message == WRONG_URL:
        return Problem.URL
    if LORA_DISABLED_HINT in message:
        return Problem.LORA
    return None


SERVE_UNAUTHORIZED = (
    "the replica refused the API key (401 Unauthorized): set the api_key_env of that replica in lorafleet "
    "serve's configuration ([[replicas]], --replica or [[discover]]) to a variable holding the key vLLM was "
    "started with (--api-key)"
)


class ServeWording(logging.Filter):
    """On the fleet's logger while ``lorafleet serve`` runs: the fleet's advice for a refused key speaks
    of the library's ``Replica``; serve's user sets ``api_key_env`` instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and UNAUTHORIZED in args:
            record.args = tuple(SERVE_UNAUTHORIZED if a == UNAUTHORIZED else a for a in args)
        return True
