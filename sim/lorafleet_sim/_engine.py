"""A simulated vLLM replica: its registry of adapter names, its adapter memory, and its scheduler.

What vLLM 0.32 does, as far as adapters are concerned (../shared/vllm/API.md §1.6, §4; the worker's
``LRUCacheWorkerLoRAManager``), and so what every policy of the simulator meets alike:

- The *registry* is the API server's: names a load (``/v1/load_lora_adapter``) or the filesystem
  resolver registered, each with the int id it got then (a new id at every registration). A request
  naming a name not in it gets a 404, or, on an engine that loads adapters itself (the resolver), waits
  for that load. A request takes the id its name has when it arrives, and runs with that id.
- The *memory* is the worker's LRU cache of at most ``memory`` adapters (``--max-cpu-loras``), by id.
  A load reads the adapter from disk and inserts it, dropping the least recently used one when the
  cache is full; an adapter is used (moves to the end) whenever a step runs a request on it, so one
  that runs is never the least recently used. An unload forgets the name only: its id stays in
  memory until the LRU order drops it (vLLM's Python frontend, every version through 0.34), unless
  the engine frees memory on unload (``frees``, a frontend that calls ``remove_lora``).
- A request whose id is no longer in memory when the scheduler starts it is read from disk again
  inside the step (a *re-read*), and starts once it is read.
- The scheduler runs at most ``concurrency`` requests (``--max-num-seqs``) using at most
  ``max_loras`` distinct adapters (``--max-loras``); a waiting request that would add one more is
  passed over, and later ones may start (vLLM V1's ``max_loras`` check).
- Every read from disk (a load, the resolver's, a re-read) takes ``load_time`` inside the engine's
  loop, one at a time: no step runs meanwhile, so every running request is paused for it and no
  request starts (API.md §4.7).

Simplified: a request's service is one span of ``duration`` seconds of steps, from its first step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import attrs

FULL, BATCH, READ = 1, 2, 3
"""Why a request an engine queues does not start at once (``Engine.holdup``): every request slot is
taken; its adapter would be one more than the batch may use; a read from disk comes first."""


@attrs.define(eq=False)
class Job:
    """A request on an engine: queued, then running with the id its adapter had when it arrived."""

    request: int
    router: int
    adapter: str
    lora: int
    """The adapter's int id in this engine's registry when the request arrived."""
    duration: float = 0.0
    start: float = 0.0
    """When its first step runs (moved on by reads from disk that come before it)."""
    end: float = 0.0
    """When its service ends (moved on by every read from disk while it runs)."""


@attrs.define(eq=False)
class Engine:
    """One vLLM replica's adapter registry, adapter memory and scheduler (see the module's docstring)."""

    id: str
    index: int
    memory: int
    """``--max-cpu-loras``: adapters the worker's LRU cache holds."""
    max_loras: int
    """``--max-loras``: distinct adapters one batch may use."""
    concurrency: int
    """``--max-num-seqs``: requests running at once."""
    load_time: float
    """Seconds a read of an adapter from disk takes."""
    frees: bool = False
    """An unload removes the adapter from memory (a frontend that calls ``remove_lora``)."""
    registry: dict[str, int] = attrs.field(factory=dict)
    """Adapter name to its int id: what ``/v1/models`` lists."""
    cache: dict[int, float] = attrs.field(factory=dict)
    """Int id in memory to when a step last used it (or it was read)."""
    names: dict[int, str] = attrs.field(factory=dict)
    """Int id to the name it was registered under."""
    running: dict[int, int] = attrs.field(factory=dict)
    """Int id to the requests running on it."""
    active: dict[Job, None] = attrs.field(factory=dict)
    """The requests running, in the order they started."""
    queue: deque[Job] = attrs.field(factory=deque)
    moved: dict[Job, None] = attrs.field(factory=dict)
    """Running requests whose ``end`` a read moved on since the simulator last took them."""
    stalled_until: float = 0.0
    """When the engine's last read from disk ends: no step runs before."""
    next_id: int = 1
    disk_reads: int = 0
    rereads: int = 0
    """Reads from disk of an id read before: the cache had dropped it while a request still needed it."""
    drops: int = 0
    """Adapters dropped from memory while their name was still registered, but for a router's victim
    whose name was unloaded before any request needed it again (``dropped``)."""
    dropped: set[int] = attrs.field(factory=set)
    """Ids dropped from memory while registered that no request has needed since: a router's victim
    (dropped for the load that took its room, then unloaded) leaves it, uncounted."""
    loaded: dict[str, list[tuple[int, int]]] = attrs.field(factory=dict)
    """Adapter being loaded through the load route to the (router, load op) pairs waiting for its answer."""
    resolving: dict[str, list[Job]] = attrs.field(factory=dict)
    """Adapter the engine is loading itself (the resolver) to the requests waiting for it."""
    requests: dict[str, dict[int, int]] = attrs.field(factory=dict)
    """Adapter to router to its requests running or waiting here: what vLLM's gauge names."""
    busy: float = 0.0
    """Seconds of service run, for the imbalance figure."""
    epoch: int = 0
    held_area: float = 0.0
    held_at: float = 0.0
    held_max: int = 0

    # -- the registry and the memory --------------------------------------------------------------

    def read(self, now: float) -> float:
        """A read from disk starts at ``now``: when it ends, after any read before it. The running
        requests it pauses join ``moved``."""
        self.disk_reads += 1
        begins = max(now, self.stalled_until)
        self.stalled_until = begins + self.load_time
        for job in self.active:
            if job.start >= begins:
                job.start += self.load_time
            job.end += self.load_time
            self.moved[job] = None
        return self.stalled_until

    def register(self, name: str, now: float) -> int:
        """A load of ``name`` from disk lands (the load route or the resolver): a new id, in memory."""
        self.account(now)
        lora = self.next_id
        self.next_id += 1
        self._insert(lora, now)
        self.names[lora] = name
        self.registry[name] = lora
        self.held_max = max(self.held_max, len(self.registry))
        return lora

    def unregister(self, name: str, now: float) -> bool:
        """The unload route: forget the name (and free its memory when the frontend does); False if
        the name was not registered."""
        lora = self.registry.pop(name, None)
        if lora is None:
            return False
        if lora in self.dropped:
            # The engine dropped it for a load and its router unloaded it after: they agreed.
            self.dropped.discard(lora)
            self.drops -= 1
        self.account(now)
        if self.frees and lora in self.cache and not self.running.get(lora):
            # A running request keeps it: the engine reads it back at its next step, which this
            # model folds into keeping it (the router never unloads under its own request).
            del self.cache[lora]
        return True

    def _insert(self, lora: int, now: float) -> None:
        """Put ``lora`` in memory, dropping the least recently used one no request runs on while full."""
        while len(self.cache) >= self.memory:
            idle = [(used, old) for old, used in self.cache.items() if not self.running.get(old)]
            if not idle:
                # Every adapter in memory runs (memory equal to max_loras, a full batch): vLLM drops
                # the least recently used all the same, and its next step reads it straight back;
                # this model keeps it, one over (vLLM's "very temporarily"), after that read.
                _, victim = min((used, old) for old, used in self.cache.items())
                self._dropped(victim)
                self.rereads += 1
                self.read(now)
                break
            _, victim = min(idle)
            del self.cache[victim]
            self._dropped(victim)
        self.cache[lora] = now

    def _dropped(self, lora: int) -> None:
        if self.registry.get(self.names[lora]) == lora:
            self.drops += 1
            self.dropped.add(lora)

    # -- the scheduler --------------------------------------------------------------------------------

    def holdup(self, lora: int, now: float) -> int:
        """Why a request on ``lora`` queued at ``now`` does not start at once (``FULL``, ``BATCH``,
        ``READ``: a read under way, or ``lora`` dropped from memory and read back first), or 0."""
        if len(self.active) >= self.concurrency:
            return FULL
        if lora not in self.running and len(self.running) >= self.max_loras:
            return BATCH
        if self.stalled_until > now or lora not in self.cache:
            return READ
        return 0

    def enqueue(self, job: Job) -> None:
        counts = self.requests.setdefault(job.adapter, {})
        counts[job.router] = counts.get(job.router, 0) + 1
        self.queue.append(job)

    def schedule(self, now: float) -> Iterator[Job]:
        """Start what the scheduler can, in queue order: each job started (its ``start`` and ``end``
        set; a re-read of its adapter moves the running ones on)."""
        if not self.queue or len(self.active) >= self.concurrency:
            return
        passed: deque[Job] = deque()
        queue = self.queue
        while queue and len(self.active) < self.concurrency:
            job = queue.popleft()
            if job.lora not in self.running and len(self.running) >= self.max_loras:
                passed.append(job)  # one adapter too many for this batch: it waits, later ones may go
                continue
            self._start(job, now)
            yield job
        passed.extend(queue)
        self.queue = passed

    def _start(self, job: Job, now: float) -> None:
        lora = job.lora
        if lora not in self.cache:
            # Dropped from memory while this request waited: read back inside the step.
            self.dropped.discard(lora)
            self.rereads += 1
            self._insert(lora, now)
            self.read(now)
        self.running[lora] = self.running.get(lora, 0) + 1
        job.start = max(now, self.stalled_until)
        job.end = job.start + job.duration
        self.active[job] = None
        self.cache[lora] = job.start

    def finish(self, job: Job, now: float) -> None:
        """A request's service ends."""
        del self.active[job]
        self.moved.pop(job, None)
        lora = job.lora
        left = self.running[lora] - 1
        if left:
            self.running[lora] = left
        else:
            del self.running[lora]
        if lora in self.cache:
            self.cache[lora] = now
        counts = self.requests[job.adapter]
        counts[job.router] -= 1
        if not counts[job.router]:
            del counts[job.router]
            if not counts:
                del self.requests[job.adapter]

    def restart(self, now: float) -> None:
        """The engine restarts: nothing registered, nothing in memory; running requests run on."""
        self.epoch += 1
        self.account(now)
        self.registry.clear()
        self.cache = {lora: used for lora, used in self.cache.items() if self.running.get(lora)}

    def account(self, now: float) -> None:
        """Integrate the number of adapters registered up to ``now``; call before it changes."""
        self.held_area += (now - self.held_at) * len(self.registry)
        self.held_at = now
