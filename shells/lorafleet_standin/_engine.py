"""The stand-in's engine: the served base model and the adapters registered at run time."""

from __future__ import annotations

import asyncio
import collections
import itertools
import math
import threading
import time

import attrs

from ._family import Family
from ._weights import weights_digest


@attrs.frozen
class Memory:
    """What the engine's adapter memory did (``max_cpu_loras``), for a test to read."""

    most: int
    """The most adapters it held at once."""
    drops: int
    """Adapters it dropped while their name stayed registered, but for a victim unloaded after."""
    rereads: int
    """Adapters a completion needed that it had dropped, read back from disk."""
    over: int = 0
    """Reads into a full memory whose every copy ran, so that it went past ``max_cpu_loras`` (vLLM
    goes over "very temporarily")."""


class Engine:
    """What a vLLM server serves, as its routes see it.

    Guarded by a lock: the server thread answers while tests read and change it from theirs.
    """

    def __init__(
        self,
        *,
        model: str,
        model_root: str,
        family: Family,
        enable_lora: bool,
        max_lora_rank: int,
        max_loras: int = 1,
        max_model_len: int = 2048,
        max_num_seqs: int = 128,
        max_cpu_loras: int | None = None,
        load_seconds: float = 0.0,
        token_seconds: float = 0.0,
    ) -> None:
        self.model = model
        self.model_root = model_root
        self.family = family
        self.enable_lora = enable_lora
        self.max_lora_rank = max_lora_rank
        self.max_loras = max_loras
        self.max_model_len = max_model_len
        if type(max_num_seqs) is not int or max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be an int of at least 1, not {max_num_seqs!r}")
        self.max_num_seqs = max_num_seqs
        self.created = int(time.time())
        self._lock = threading.Condition()
        self._adapters: dict[str, str] = {}
        self._weights: dict[str, str] = {}
        """Registered name to the ``weights_digest`` of its files as the engine last read them."""
        self._ids = itertools.count(1)
        self._running: dict[str | None, int] = {}
        """Completions in flight by adapter (None: the base model), in the order first seen."""
        self._series: dict[tuple[str, ...], float] = {}
        """``vllm:lora_requests_info``: every set of adapters ever current, to when it last was."""
        self._stamp = 0.0
        self._batch = 0
        """Completions in the batch (``vllm:num_requests_running``), at most ``max_num_seqs``."""
        self._queue: collections.deque[asyncio.Future[None]] = collections.deque()
        """Completions waiting for a place in it (``vllm:num_requests_waiting``), first come first."""
        if max_cpu_loras is not None and (type(max_cpu_loras) is not int or max_cpu_loras < 1):
            raise ValueError(f"max_cpu_loras must be an int of at least 1, or None, not {max_cpu_loras!r}")
        self.max_cpu_loras = max_cpu_loras
        for name, value in (("load_seconds", load_seconds), ("token_seconds", token_seconds)):
            if not (type(value) in (int, float) and 0 <= value < math.inf):
                raise ValueError(f"{name} must be a finite number of seconds, at least 0, not {value!r}")
        self.load_seconds = float(load_seconds)
        self.token_seconds = float(token_seconds)
        self._stalled_until = 0.0
        """``time.monotonic()`` when the last read from disk ends: no step runs before."""
        self._stalled_total = 0.0
        """Seconds of reads from disk so far: a completion's steps take longer by those during them."""
        self._copies = itertools.count(1)
        self._copy: dict[str, int] = {}
        """Registered name to its copy in memory (a new one at each registration, as vLLM's int id)."""
        self._memory: collections.OrderedDict[int, str] = collections.OrderedDict()
        """Copies in memory, least recently used first (only with ``max_cpu_loras``)."""
        self._dropped: set[int] = set()
        self._most = self._drops = self._rereads = self._over = 0

    @property
    def adapters(self) -> dict[str, str]:
        """Registered adapters, name to path, in registration order."""
        with self._lock:
            return dict(self._adapters)

    def serves(self, name: str) -> bool:
        """Whether ``name`` is the base model or a registered adapter."""
        with self._lock:
            return name == self.model or name in self._adapters

    def has(self, name: str) -> bool:
        with self._lock:
            return name in self._adapters

    def register(self, name: str, path: str, weights: str = "") -> bool:
        """Register ``name``, its files read as ``weights`` (their ``weights_digest``); False, changing
        nothing, when it is registered already."""
        with self._lock:
            if name in self._adapters:
                return False
            self._adapters[name] = path
            self._weights[name] = weights
            self._read_in(name)
            return True

    def put(self, name: str, path: str) -> None:
        """Register ``name`` whether or not it was (as another router's load would), reading its files."""
        weights = weights_digest(path)
        with self._lock:
            self._adapters[name] = path
            self._weights[name] = weights
            self._read_in(name)

    def weights(self, name: str) -> str:
        """The ``weights_digest`` of adapter ``name`` as the engine read it ("" for the base model)."""
        with self._lock:
            return self._weights.get(name, "")

    def read_again(self, name: str) -> None:
        """A dropped adapter was read back from disk for a completion: what its folder holds now, as
        vLLM reads the path it was loaded from again (new weights written there since are read)."""
        with self._lock:
            path = self._adapters.get(name)
        if path is None:
            return
        weights = weights_digest(path)
        with self._lock:
            if self._adapters.get(name) == path:
                self._weights[name] = weights

    def unregister(self, name: str) -> bool:
        """Forget ``name``; False when it was not registered. Like vLLM's Python frontend, the copy in
        memory stays until the least-recently-used order drops it."""
        with self._lock:
            copy = self._copy.pop(name, None)
            self._weights.pop(name, None)
            if copy in self._dropped:  # dropped for a load, then unloaded: engine and router agree
                self._dropped.discard(copy)
                self._drops -= 1
            return self._adapters.pop(name, None) is not None

    def restart(self) -> None:
        """Forget every runtime-loaded adapter and the metric's series, as a restarted vLLM does."""
        with self._lock:
            self._adapters.clear()
            self._weights.clear()
            self._series.clear()
            self._copy.clear()
            self._memory.clear()
            self._dropped.clear()

    def memory(self) -> Memory:
        """What the adapter memory did (all zeros without ``max_cpu_loras``)."""
        with self._lock:
            return Memory(self._most, self._drops, self._rereads, self._over)

    def _read_in(self, name: str) -> None:
        """A load read ``name`` from disk: a new copy in memory, the least recently used no completion
        runs on dropped first if it is full (vLLM's ``LRUCacheWorkerLoRAManager``)."""
        if self.max_cpu_loras is None:
            return
        copy = next(self._copies)
        self._copy[name] = copy
        self._make_room()
        self._memory[copy] = name
        self._most = max(self._most, len(self._memory))

    def _make_room(self) -> None:
        assert self.max_cpu_loras is not None
        while len(self._memory) >= self.max_cpu_loras:
            victim = next((c for c, n in self._memory.items() if not self._running.get(n)), None)
            if victim is None:
                self._over += 1
                return  # every copy runs: vLLM goes over "very temporarily"
            name = self._memory.pop(victim)
            if self._copy.get(name) == victim:
                self._drops += 1
                self._dropped.add(victim)

    def _use(self, name: str) -> bool:
        """A step runs ``name``: its copy is the most recently used, read back first if dropped (True)."""
        copy = self._copy.get(name)
        if self.max_cpu_loras is None or copy is None:
            return False
        if copy in self._memory:
            self._memory.move_to_end(copy)
            return False
        self._dropped.discard(copy)  # needed again: a drop that cost a read
        self._rereads += 1
        self._make_room()
        self._memory[copy] = name
        self._most = max(self._most, len(self._memory))
        return True

    async def read_from_disk(self) -> None:
        """A read of an adapter from disk (a load, or a completion's re-read) taking ``load_seconds``
        inside the engine's loop: after any read before it, and no step runs meanwhile (API.md §4.7)."""
        if not self.load_seconds:
            return
        with self._lock:
            now = time.monotonic()
            self._stalled_until = max(now, self._stalled_until) + self.load_seconds
            self._stalled_total += self.load_seconds
            until = self._stalled_until
        await asyncio.sleep(until - now)

    async def steps(self, tokens: int) -> None:
        """Generate ``tokens`` at ``token_seconds`` each: not while a read from disk runs, and longer by
        every read that runs meanwhile (each pauses every running completion)."""
        if not self.token_seconds:
            return
        left = tokens * self.token_seconds
        while True:
            with self._lock:
                stalled = self._stalled_until - time.monotonic()
            if stalled <= 0:
                break
            await asyncio.sleep(stalled)
        while left > 0:
            with self._lock:
                seen = self._stalled_total
            await asyncio.sleep(left)
            with self._lock:
                left = self._stalled_total - seen

    def next_id(self) -> int:
        """A fresh number for ids the answers carry (permissions, completions)."""
        with self._lock:
            return next(self._ids)

    async def join_batch(self) -> None:
        """Wait for a place in the batch, behind those queued first; ``leave_batch`` gives it back.

        Called on the server's loop only; tests read the counts from their own threads.
        """
        with self._lock:
            self._lock.notify_all()  # a request came in: running or waiting, a waiter sees it
            if self._batch < self.max_num_seqs and not self._queue:
                self._batch += 1
                return
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._queue.append(turn)
        try:
            await turn
        except BaseException:
            with self._lock:
                handed = turn.done() and not turn.cancelled()
                if not handed and turn in self._queue:
                    self._queue.remove(turn)
            if handed:
                self.leave_batch()  # its place came as it went away: the next in line takes it
            raise

    def leave_batch(self) -> None:
        """A completion in the batch ended: its place goes to the first one queued."""
        with self._lock:
            self._lock.notify_all()
            while self._queue:
                turn = self._queue.popleft()
                if not turn.done():
                    turn.set_result(None)
                    return
            self._batch -= 1

    def requests(self) -> tuple[int, int]:
        """(running, waiting): the completions in the batch and those queued for a place in it."""
        with self._lock:
            return self._batch, len(self._queue)

    def wait_for_requests(self, count: int, timeout: float) -> bool:
        """Block until ``count`` completions are running or waiting; False after ``timeout`` s."""
        with self._lock:
            return self._lock.wait_for(lambda: self._batch + len(self._queue) >= count, timeout)

    def started(self, adapter: str | None) -> bool:
        """A completion for ``adapter`` (None: the base model) is running, from now until ``ended``;
        True when its adapter had to be read back from disk (``read_from_disk`` then takes its time)."""
        with self._lock:
            reread = self._use(adapter) if adapter is not None else False
            self._running[adapter] = self._running.get(adapter, 0) + 1
            self._step()
            return reread

    def ended(self, adapter: str | None) -> None:
        """The completion ``started`` with ``adapter`` has ended (answered, failed or dropped)."""
        with self._lock:
            if adapter is not None and self._copy.get(adapter) in self._memory:
                self._memory.move_to_end(self._copy[adapter])  # its last step used it
            left = self._running[adapter] - 1
            if left:
                self._running[adapter] = left
            else:
                del self._running[adapter]
            self._step()

    def running(self) -> tuple[str, ...]:
        """The adapters with completions in flight, in the order first seen."""
        with self._lock:
            return tuple(name for name in self._running if name is not None)

    def running_series(self) -> list[tuple[tuple[str, ...], float]]:
        """``vllm:lora_requests_info``'s series: (adapters, when last current), in the order first seen.

        While requests run the engine steps, and every step stamps the current set again; an idle
        engine takes no step, so its last set keeps the time of the step that emptied it.
        """
        with self._lock:
            if self._running:
                self._step()
            return list(self._series.items())

    def _step(self) -> None:
        # One map fills both labels in vLLM (running and waiting carry the same set), keyed by
        # adapter name in the order requests arrived; the base model is no adapter.
        # Steps are milliseconds apart in vLLM: never stamp two alike, or the newest would be a tie.
        current = tuple(name for name in self._running if name is not None)
        self._stamp = max(time.time(), math.nextafter(self._stamp, math.inf))
        self._series[current] = self._stamp
